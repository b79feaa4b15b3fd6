"""The text side of a model: encode, decode, special ids, chat template, stop ids."""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import TokenizerError
from .chat_template import render_chat_template
from .detokenizer import Detokenizer, StopStrings

__all__ = ["Tokenizer", "load_tokenizer"]

_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


class Tokenizer:
    """A Hugging Face ``tokenizers`` tokenizer with the model's special tokens and chat template.

    Built by :func:`load_tokenizer` from ``tokenizer.json`` (+ ``tokenizer_config.json``,
    ``generation_config.json``, ``chat_template.jinja``) or from a GGUF file's metadata.
    ``eos_token_ids`` holds every id that ends a generation (the config's, the generation
    config's and the tokenizer's EOS, deduplicated, in that order).
    """

    def __init__(
        self,
        backend: Any,
        *,
        special_tokens: Mapping[str, str | None],
        eos_token_ids: Iterable[int],
        chat_template: str | None,
        source: str,
    ) -> None:
        self.backend = backend
        self.special_tokens = dict(special_tokens)
        self.chat_template = chat_template
        self.source = source
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(int(i) for i in eos_token_ids))
        self.bos_token_id = self._id_of(self.special_tokens.get("bos_token"))
        self.eos_token_id = self.eos_token_ids[0] if self.eos_token_ids else None
        self.pad_token_id = self._id_of(self.special_tokens.get("pad_token"))

    def _id_of(self, token: str | None) -> int | None:
        if token is None:
            return None
        tid = self.backend.token_to_id(token)
        return None if tid is None else int(tid)

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @property
    def bos_token(self) -> str | None:
        """The beginning-of-sequence token text, or None."""
        return self.special_tokens.get("bos_token")

    @property
    def eos_token(self) -> str | None:
        """The end-of-sequence token text, or None."""
        return self.special_tokens.get("eos_token")

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the special tokens (skipped by ``decode(..., skip_special_tokens=True)``)."""
        return frozenset(
            int(i)
            for i, t in self.backend.get_added_tokens_decoder().items()
            if getattr(t, "special", False)
        )

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` adds the model's BOS where it uses one.

        Special-token text in ``text`` (``<|im_start|>``) becomes the special id.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}")
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """The text of ``ids`` (an incomplete UTF-8 sequence at the end decodes as U+FFFD)."""
        return str(
            self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        )

    def token_to_id(self, token: str) -> int | None:
        """The id of the token text ``token``, or None."""
        tid = self.backend.token_to_id(token)
        return None if tid is None else int(tid)

    def id_to_token(self, token_id: int) -> str | None:
        """The token text of ``token_id``, or None."""
        tok = self.backend.id_to_token(int(token_id))
        return None if tok is None else str(tok)

    def is_eos(self, token_id: int) -> bool:
        """True when ``token_id`` ends a generation."""
        return int(token_id) in self.eos_token_ids

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        *,
        tools: Sequence[Any] | None = None,
        documents: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text of ``messages`` rendered with the model's chat template.

        As transformers' ``apply_chat_template(..., tokenize=False)``: ``add_generation_prompt``
        appends the assistant turn's header. Encode the result with
        ``encode(text, add_special_tokens=False)`` (the template writes the special tokens).
        Raises :class:`TokenizerError` for a model without a template or a message without a
        role.
        """
        if not self.chat_template:
            raise TokenizerError(
                f"{self.source}: the tokenizer has no chat template (tokenizer_config.json "
                "'chat_template', chat_template.jinja or GGUF tokenizer.chat_template); pass a "
                "plain prompt instead",
                path=self.source,
            )
        return render_chat_template(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens={k: self.special_tokens.get(k) for k in _SPECIAL_KEYS},
            tools=tools,
            documents=documents,
            **kwargs,
        )

    def detokenizer(
        self, *, skip_special_tokens: bool = True, context: Iterable[int] = ()
    ) -> Detokenizer:
        """An incremental :class:`Detokenizer` for a stream of generated ids."""
        return Detokenizer(self, skip_special_tokens=skip_special_tokens, context=context)

    @staticmethod
    def stop_strings(stops: Iterable[str] | str | None) -> StopStrings:
        """A :class:`StopStrings` matcher for user stop strings."""
        return StopStrings(stops)

    def __repr__(self) -> str:
        return (
            f"<Tokenizer {self.vocab_size} ids, eos {list(self.eos_token_ids)} from {self.source}>"
        )


def _json(path: pathlib.Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path}: cannot read: {exc}", path=str(path)) from exc
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: not a JSON object", path=str(path))
    return data


def _token_text(value: Any) -> str | None:
    """A special token from tokenizer_config.json: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _ids(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [int(v) for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _chat_template(folder: pathlib.Path, config: Mapping[str, Any]) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():  # the newer layout: the template in its own file
        return jinja.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: transformers uses "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _from_folder(folder: pathlib.Path) -> Tokenizer | None:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer as HFTokenizer

    try:
        backend = HFTokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for malformed files
        raise TokenizerError(f"{path}: not a valid tokenizer.json: {exc}", path=str(path)) from exc
    tok_config = _json(folder / "tokenizer_config.json")
    model_config = _json(folder / "config.json")
    gen_config = _json(folder / "generation_config.json")
    specials = {k: _token_text(tok_config.get(k)) for k in _SPECIAL_KEYS}
    eos = _ids(gen_config.get("eos_token_id")) + _ids(model_config.get("eos_token_id"))
    eos_text = specials.get("eos_token")
    eos_id = backend.token_to_id(eos_text) if eos_text is not None else None
    if eos_id is not None:
        eos.append(int(eos_id))
    for key, ids in (("bos_token", model_config.get("bos_token_id")),):
        if specials.get(key) is None and _ids(ids):
            specials[key] = backend.id_to_token(_ids(ids)[0])
    if specials.get("eos_token") is None and eos:
        specials["eos_token"] = backend.id_to_token(eos[0])
    return Tokenizer(
        backend,
        special_tokens=specials,
        eos_token_ids=eos,
        chat_template=_chat_template(folder, tok_config),
        source=str(folder),
    )


def _from_gguf(path: pathlib.Path, metadata: Mapping[str, Any] | None = None) -> Tokenizer | None:
    from .gguf_vocab import build_gguf_tokenizer

    if metadata is None:
        from ..loading.gguf_format import GGUFFile

        gguf = GGUFFile(path)
        metadata = gguf.metadata
        gguf.close()
    if not any(k.startswith("tokenizer.ggml.") for k in metadata):
        return None  # no vocabulary stored: like a directory without tokenizer.json
    backend = build_gguf_tokenizer(dict(metadata), str(path))
    tokens = metadata.get("tokenizer.ggml.tokens") or []

    def text(key: str) -> str | None:
        tid = metadata.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(tid)] if tid is not None and 0 <= int(tid) < len(tokens) else None

    specials = {
        "bos_token": text("bos"),
        "eos_token": text("eos"),
        "unk_token": text("unknown"),
        "pad_token": text("padding"),
    }
    eos = [
        int(metadata[f"tokenizer.ggml.{k}_token_id"])
        for k in ("eos", "eot", "eom")
        if metadata.get(f"tokenizer.ggml.{k}_token_id") is not None
    ]
    template = metadata.get("tokenizer.chat_template")
    return Tokenizer(
        backend,
        special_tokens=specials,
        eos_token_ids=eos,
        chat_template=template if isinstance(template, str) else None,
        source=str(path),
    )


def load_tokenizer(
    path: str | os.PathLike[str], *, metadata: Mapping[str, Any] | None = None
) -> Tokenizer | None:
    """The tokenizer of a Hugging Face model directory or a ``.gguf`` file.

    A directory without ``tokenizer.json``, or a GGUF file without ``tokenizer.ggml.*``
    metadata, gives None (the model still runs on token ids).
    ``metadata``: the GGUF metadata when the file is already parsed (saves a second read).
    Raises :class:`TokenizerError` for malformed tokenizer files and
    :class:`~pygpukit.llm.errors.UnsupportedModelError` for a GGUF tokenizer type not
    supported yet.
    """
    p = pathlib.Path(path)
    if p.is_file() and p.suffix.lower() == ".gguf":
        return _from_gguf(p, metadata)
    if p.is_dir():
        return _from_folder(p)
    raise TokenizerError(f"{p}: no such model directory or .gguf file", path=str(p))
