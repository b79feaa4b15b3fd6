"""A Hugging Face ``tokenizers`` tokenizer built from a GGUF file's ``tokenizer.ggml.*`` metadata.

Byte-level BPE (``tokenizer.ggml.model == "gpt2"``, llama.cpp's name for GPT-2-style BPE, used
by Llama 3, Qwen2/3 and SmolLM): the vocabulary and merges come from the metadata; the
pre-tokenizer (how text is split before BPE) is chosen by ``tokenizer.ggml.pre`` from a table
of the splitting rules those model families use. Control tokens become special tokens,
user-defined ones added tokens. SentencePiece vocabularies (``"llama"``) are not supported yet.
"""

from __future__ import annotations

from typing import Any

from ..errors import TokenizerError, UnsupportedModelError

__all__ = ["PRE_TOKENIZERS", "build_gguf_tokenizer"]

# GGUF token types (llama.cpp's llama_token_type).
_CONTROL, _USER_DEFINED = 3, 4

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
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
    from tokenizers import Tokenizer as HFTokenizer

    kind = metadata.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise UnsupportedModelError(
            f"{path}: GGUF tokenizer type {kind!r} is not supported yet (byte-level BPE, "
            "'gpt2', is); use the model's Hugging Face directory with tokenizer.json",
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
    specials = [tokens[i] for i, t in enumerate(types) if t == _CONTROL]
    user = [tokens[i] for i, t in enumerate(types) if t == _USER_DEFINED]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if user:
        tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in user])
    bos = metadata.get("tokenizer.ggml.bos_token_id")
    if metadata.get("tokenizer.ggml.add_bos_token") and bos is not None:
        bos_text = tokens[int(bos)]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos_text} $A",
            pair=f"{bos_text} $A {bos_text} $B",
            special_tokens=[(bos_text, int(bos))],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok
