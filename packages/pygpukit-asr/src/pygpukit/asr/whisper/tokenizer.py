"""Whisper's tokenizer: byte-level BPE (``tokenizer.json``) plus its special tokens.

The special tokens sit after the text vocabulary: ``<|endoftext|>``, ``<|startoftranscript|>``,
one ``<|xx|>`` per language, ``<|translate|>``, ``<|transcribe|>``, ``<|startoflm|>``,
``<|startofprev|>``, ``<|nocaptions|>`` (no speech), ``<|notimestamps|>``, then 1501 timestamp
tokens ``<|0.00|>`` to ``<|30.00|>`` in 20 ms steps (not always listed in ``tokenizer.json``:
they are ids from ``<|notimestamps|> + 1``).
"""

from __future__ import annotations

import pathlib
import re

from ..errors import ModelFormatError, UnsupportedModelError

__all__ = ["WhisperTokenizer"]

_LANGUAGE = re.compile(r"^<\|([a-z]{2,3}|haw|yue)\|>$")


class WhisperTokenizer:
    """Text <-> ids and the special ids of one Whisper vocabulary."""

    def __init__(self, path: str | pathlib.Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - a declared dependency
            raise ModelFormatError(
                "the tokenizers package is needed: pip install tokenizers"
            ) from None
        self.path = pathlib.Path(path)
        try:
            self._tok = Tokenizer.from_file(str(self.path))
        except Exception as exc:  # tokenizers raises a bare Exception for malformed files
            raise ModelFormatError(
                f"{self.path}: not a tokenizer.json: {exc}", path=str(path)
            ) from exc

        def special(text: str) -> int:
            i = self._tok.token_to_id(text)
            if i is None:
                raise ModelFormatError(
                    f"{self.path}: special token {text} is missing", path=str(path)
                )
            return int(i)

        self.eot = special("<|endoftext|>")
        self.sot = special("<|startoftranscript|>")
        self.translate = special("<|translate|>")
        self.transcribe = special("<|transcribe|>")
        self.sot_prev = special("<|startofprev|>")
        self.sot_lm = special("<|startoflm|>")
        self.no_timestamps = special("<|notimestamps|>")
        self.no_speech = special("<|nocaptions|>")
        self.timestamp_begin = self.no_timestamps + 1
        #: language code -> token id, in vocabulary order (the language-detection classes).
        self.languages: dict[str, int] = {}
        for i in range(self.sot + 1, self.translate):
            token = self._tok.id_to_token(i) or ""
            m = _LANGUAGE.match(token)
            if m:
                self.languages[m.group(1)] = i

    def language_id(self, code: str) -> int:
        """The ``<|code|>`` token; :class:`UnsupportedModelError` lists the known codes."""
        if code not in self.languages:
            known = ", ".join(sorted(self.languages))
            raise UnsupportedModelError(f"unknown language code {code!r}; known codes: {known}")
        return self.languages[code]

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        """Text of the text tokens among ``ids`` (special and timestamp tokens dropped)."""
        return str(self._tok.decode([i for i in ids if i < self.eot]))

    def token_text(self, i: int) -> str:
        """One token's text (for word timestamps): the bytes it stands for, decoded."""
        return str(self._tok.decode([i])) if i < self.eot else ""
