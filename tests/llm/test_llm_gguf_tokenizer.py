"""Tokenizers rebuilt from synthetic GGUF metadata: pre-tokenizer table, BOS, special tokens."""

from __future__ import annotations

import pytest
from llm_files import gguf_bytes

from pygpukit.llm.errors import TokenizerError, UnsupportedModelError
from pygpukit.llm.tokenizer import load_tokenizer


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table: printable bytes as themselves, the rest shifted."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, shift = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + shift)
            shift += 1
    return [chars[b] for b in range(256)]


def _write(tmp_path, pre: str, *, model: str = "gpt2", add_bos: bool = True):
    specials = ["<|begin|>", "<|end|>", "<|eot|>"]
    # "3 4" ranks before "12 3": BPE over one word "123456" gives 12|34|5|6, while a
    # pre-tokenizer that first cuts "123" | "456" gives 123|456.
    merges = ["1 2", "3 4", "12 3", "4 5", "45 6", "h e", "he l", "hel l", "hell o"]
    merged = ["12", "34", "123", "45", "456", "he", "hel", "hell", "hello"]
    tokens = specials + _byte_chars() + merged
    types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    meta = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": model,
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.eot_token_id": 2,
        "tokenizer.ggml.add_bos_token": add_bos,
        "tokenizer.chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}"
        "{{ eos_token }}{% endfor %}",
    }
    path = tmp_path / "t.gguf"
    path.write_bytes(gguf_bytes(meta, []))
    return path, tokens


def test_llama3_style_pre_tokenizer_bos_and_eos(tmp_path):
    path, _ = _write(tmp_path, "llama-bpe")
    tok = load_tokenizer(path)
    ids = tok.encode("hello 123456")
    assert ids[0] == 0  # add_bos_token
    # Digits are cut in groups of up to three before BPE, and the space stands alone.
    assert [tok.decode([i]) for i in ids[1:]] == ["hello", " ", "123", "456"]
    assert tok.decode(ids, skip_special_tokens=True) == "hello 123456"
    assert tok.eos_token_ids == (1, 2) and tok.eos_token == "<|end|>"
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "<|begin|>hi<|end|>"
    assert tok.encode("<|eot|>x", add_special_tokens=False)[0] == 2


def test_gpt2_pre_tokenizer_keeps_the_number_whole(tmp_path):
    path, _ = _write(tmp_path, "gpt2", add_bos=False)
    tok = load_tokenizer(path)
    ids = tok.encode("hello 123456")
    assert [tok.decode([i]) for i in ids] == ["hello", " ", "12", "34", "5", "6"]


def test_smollm_pre_tokenizer_isolates_digits(tmp_path):
    path, _ = _write(tmp_path, "smollm", add_bos=False)
    tok = load_tokenizer(path)
    ids = tok.encode("123")
    assert [tok.decode([i]) for i in ids] == ["1", "2", "3"]  # never merged into "123"


SP = "\u2581"  # SentencePiece's visible space


def _sentencepiece_vocab(rng, size: int = 40) -> tuple[list[str], list[float]]:
    """A random SentencePiece BPE vocabulary, grown as training grows one: each new token
    joins two existing ones, with a lower score than every token before it. A candidate is
    kept only if it leaves every token one split into two tokens, so the score-greedy
    reference below and BPE merges cannot disagree on a tie."""
    base = [SP, *"abcdelnorst"]
    tokens = list(base)

    def splits(t: str, vocab: set[str]) -> int:
        return sum(t[:i] in vocab and t[i:] in vocab for i in range(1, len(t)))

    while len(tokens) < len(base) + size:
        new = tokens[rng.integers(len(tokens))] + tokens[rng.integers(len(tokens))]
        if new in tokens or len(new) > 6:
            continue
        vocab = {*tokens, new}
        if all(splits(t, vocab) <= 1 for t in vocab if len(t) > 1 and t not in base):
            tokens.append(new)
    scores = [0.0] * len(base) + [-float(i) for i in range(len(tokens) - len(base))]
    return tokens, scores


def _spm_reference(text: str, tokens: list[str], scores: list[float]) -> list[int]:
    """SentencePiece BPE as llama.cpp runs it: join the adjacent pair whose concatenation is
    the highest-scoring token (leftmost first) until none is; then bytes for the unknown."""
    ids = {t: i for i, t in enumerate(tokens)}
    syms = list(SP + text.replace(" ", SP))
    while True:
        best = None
        for i in range(len(syms) - 1):
            joined = syms[i] + syms[i + 1]
            if joined in ids and (best is None or scores[ids[joined]] > best[0]):
                best = (scores[ids[joined]], i)
        if best is None:
            break
        i = best[1]
        syms[i : i + 2] = [syms[i] + syms[i + 1]]
    out = []
    for sym in syms:
        if sym in ids:
            out.append(ids[sym])
        else:
            out += [ids[f"<0x{b:02X}>"] for b in sym.encode()]
    return out


def _write_sentencepiece(tmp_path, tokens, scores, **extra):
    """A GGUF holding the vocabulary after ``<unk> <s> </s>`` and the 256 byte tokens."""
    vocab = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *tokens]
    meta = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": vocab,
        "tokenizer.ggml.scores": [0.0] * 259 + scores,
        "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * len(tokens),
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        **extra,
    }
    path = tmp_path / "spm.gguf"
    path.write_bytes(gguf_bytes(meta, []))
    return path, vocab, meta["tokenizer.ggml.scores"]


def test_sentencepiece_vocab_encodes_as_llama_cpp(tmp_path, rng):
    path, vocab, scores = _write_sentencepiece(tmp_path, *_sentencepiece_vocab(rng))
    tok = load_tokenizer(path)
    pieces = vocab[259:]
    for _ in range(20):  # texts made of the vocabulary's pieces, so merges apply
        picks = rng.integers(len(pieces), size=int(rng.integers(1, 9)))
        text = "".join(pieces[i] for i in picks).replace(SP, " ").strip() or "a"
        got = tok.encode(text)
        assert got == [1, *_spm_reference(text, vocab, scores)], text
        assert tok.decode(got, skip_special_tokens=True) == text
    # Outside the vocabulary: UTF-8 bytes ("é" is C3 A9, a newline 0A), decoded back whole.
    got = tok.encode("sé\nt", add_special_tokens=False)
    assert got == _spm_reference("sé\nt", vocab, scores)
    assert [vocab[i] for i in got if 3 <= i < 259] == ["<0xC3>", "<0xA9>", "<0x0A>"]
    assert tok.decode(got) == "sé\nt"
    assert tok.bos_token_id == 1 and tok.eos_token_ids == (2,)


def test_sentencepiece_without_space_prefix_or_bos(tmp_path, rng):
    tokens, scores = _sentencepiece_vocab(rng)
    path, _, _ = _write_sentencepiece(
        tmp_path, tokens, scores,
        **{"tokenizer.ggml.add_space_prefix": False, "tokenizer.ggml.add_bos_token": False},
    )  # fmt: skip
    tok = load_tokenizer(path)
    ids = tok.encode("do not")
    assert ids and ids[0] != 1
    assert tok.id_to_token(ids[0])[0] != SP  # no space was prepended
    assert tok.decode(ids) == "do not"


def test_sentencepiece_needs_scores(tmp_path, rng):
    tokens, scores = _sentencepiece_vocab(rng)
    path, _, _ = _write_sentencepiece(tmp_path, tokens, scores[:-1])
    with pytest.raises(TokenizerError, match=r"tokenizer\.ggml\.scores"):
        load_tokenizer(path)


def test_unsupported_tokenizer_model_is_named(tmp_path):
    path, _ = _write(tmp_path, "default", model="bert")
    with pytest.raises(UnsupportedModelError, match="'bert' is not supported yet"):
        load_tokenizer(path)


def test_unknown_pre_tokenizer_is_named(tmp_path):
    path, _ = _write(tmp_path, "falcon")
    with pytest.raises(UnsupportedModelError, match="'falcon'"):
        load_tokenizer(path)
