"""A Hugging Face ``tokenizers`` tokenizer built from a GGUF file's ``tokenizer.ggml.*`` metadata.

Byte-level BPE (``tokenizer.ggml.model == "gpt2"``, llama.cpp's name for GPT-2-style BPE, used
by Llama 3, Qwen2/3 and SmolLM): the vocabulary and merges come from the metadata; the
pre-tokenizer (how text is split before BPE) is chosen by ``tokenizer.ggml.pre`` from a table
of the splitting rules those model families use. Control tokens become special tokens,
user-defined ones added tokens.

SentencePiece BPE (``"llama"``: Llama 2, Mistral, TinyLlama): the metadata holds tokens with
scores and no merges. Encoding repeatedly joins the adjacent pair whose concatenation is the
highest-scoring token, which is BPE with the merges ranked by that score; the merges are
rebuilt from the vocabulary (every split of a token into two tokens). Spaces are ``▁``
(U+2581), the text gets a leading ``▁`` unless ``tokenizer.ggml.add_space_prefix`` is false,
and characters outside the vocabulary fall back to the ``<0xXX>`` tokens of their UTF-8 bytes.
"""

from __future__ import annotations

from typing import Any

from ..errors import TokenizerError, UnsupportedModelError

__all__ = ["PRE_TOKENIZERS", "build_gguf_tokenizer"]

# GGUF token types (llama.cpp's llama_token_type).
_UNKNOWN, _CONTROL, _USER_DEFINED, _BYTE = 2, 3, 4, 6
_SPACE = "\u2581"  # SentencePiece's visible space

_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: ``tokenizer.ggml.pre`` -> (split regex, digits one by one first, BPE ignore_merges).
PRE_TOKENIZERS: dict[str, tuple[str, bool, bool]] = {
    "default": (_GPT2_SPLIT, False, False),
    "gpt2": (_GPT2_SPLIT, False, False),
    "smollm": (_GPT2_SPLIT, True, False),
    "llama-bpe": (_LLAMA3_SPLIT, False, True),
    "llama3": (_LLAMA3_SPLIT, False, True),
    "qwen2": (_QWEN2_SPLIT, False, False),
}


def build_gguf_tokenizer(metadata: dict[str, Any], path: str) -> Any:
    """A ``tokenizers.Tokenizer`` for the GGUF ``metadata`` of the file at ``path``."""
    from tokenizers import Regex, decoders, models, pre_tokenizers, processors
    from tokenizers import Tokenizer as HFTokenizer

    kind = metadata.get("tokenizer.ggml.model")
    if kind == "llama":
        return _sentencepiece(metadata, path)
    if kind != "gpt2":
        raise UnsupportedModelError(
            f"{path}: GGUF tokenizer type {kind!r} is not supported yet (byte-level BPE, "
            "'gpt2', and SentencePiece BPE, 'llama', are); use the model's Hugging Face "
            "directory with tokenizer.json",
            path=path,
        )
    pre = metadata.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedModelError(
            f"{path}: GGUF pre-tokenizer {pre!r} is not supported; supported: "
            f"{', '.join(PRE_TOKENIZERS)}",
            path=path,
        )
    tokens = metadata.get("tokenizer.ggml.tokens")
    merges = metadata.get("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not isinstance(merges, list):
        raise TokenizerError(
            f"{path}: the GGUF metadata lacks tokenizer.ggml.tokens or tokenizer.ggml.merges",
            path=path,
        )
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = []
    for m in merges:
        left, sep, right = m.partition(" ")
        if not sep:
            raise TokenizerError(f"{path}: malformed GGUF merge {m!r}", path=path)
        pairs.append((left, right))
    split, digits, ignore_merges = PRE_TOKENIZERS[pre]
    tok = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))
    steps: list[Any] = [pre_tokenizers.Split(Regex(split), behavior="isolated")]
    if digits:
        steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    _add_special_tokens(tok, tokens, types)
    if not _add_bos(tok, metadata, tokens, default=False):
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _sentencepiece(metadata: dict[str, Any], path: str) -> Any:
    """SentencePiece BPE (``tokenizer.ggml.model == "llama"``) as a ``tokenizers`` BPE."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers

    tokens = metadata.get("tokenizer.ggml.tokens")
    scores = metadata.get("tokenizer.ggml.scores")
    if not isinstance(tokens, list) or not isinstance(scores, list) or len(scores) != len(tokens):
        raise TokenizerError(
            f"{path}: a SentencePiece GGUF vocabulary needs tokenizer.ggml.tokens and as many "
            "tokenizer.ggml.scores",
            path=path,
        )
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = _merges_from_scores(tokens, [float(x) for x in scores], types, vocab)
    unk = metadata.get("tokenizer.ggml.unknown_token_id")
    unk_text = tokens[int(unk)] if unk is not None and 0 <= int(unk) < len(tokens) else None
    model = models.BPE(vocab=vocab, merges=merges, unk_token=unk_text, fuse_unk=True,
                       byte_fallback=True)  # fmt: skip
    tok = HFTokenizer(model)
    prefix = metadata.get("tokenizer.ggml.add_space_prefix", True)
    steps: list[Any] = [normalizers.Replace(" ", _SPACE)]
    undo: list[Any] = [decoders.Replace(_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        steps.insert(0, normalizers.Prepend(_SPACE))
        undo.append(decoders.Strip(" ", 1, 0))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Sequence(undo)
    _add_special_tokens(tok, tokens, types)
    _add_bos(tok, metadata, tokens, default=True)
    return tok


def _merges_from_scores(
    tokens: list[str], scores: list[float], types: list[int], vocab: dict[str, int]
) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece's score-ordered joining.

    Every split of a normal token into two tokens of the vocabulary is a merge, ranked by the
    score of the token it makes (highest first); the splits of one token follow the ids of
    their left, then right, parts.
    """
    ranked = []
    for i, token in enumerate(tokens):
        if types[i] not in (1, _USER_DEFINED) or len(token) < 2:
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[i], vocab[left], vocab[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _add_special_tokens(tok: Any, tokens: list[str], types: list[int]) -> None:
    """Control (and unknown) tokens as special tokens, user-defined ones as added tokens."""
    from tokenizers import AddedToken

    specials = [tokens[i] for i, t in enumerate(types) if t in (_CONTROL, _UNKNOWN)]
    user = [tokens[i] for i, t in enumerate(types) if t == _USER_DEFINED]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if user:
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in user])


def _add_bos(tok: Any, metadata: dict[str, Any], tokens: list[str], *, default: bool) -> bool:
    """Prepend the BOS token when ``tokenizer.ggml.add_bos_token`` (else ``default``) says so."""
    from tokenizers import processors

    bos = metadata.get("tokenizer.ggml.bos_token_id")
    if not metadata.get("tokenizer.ggml.add_bos_token", default) or bos is None:
        return False
    bos_text = tokens[int(bos)]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos_text} $A",
        pair=f"{bos_text} $A {bos_text} $B",
        special_tokens=[(bos_text, int(bos))],
    )
    return True
