"""Tokenizers rebuilt from synthetic GGUF metadata: pre-tokenizer table, BOS, special tokens."""

from __future__ import annotations

import pytest
from llm_files import gguf_bytes

from pygpukit.llm.errors import UnsupportedModelError
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


def test_sentencepiece_vocab_is_not_supported_yet(tmp_path):
    path, _ = _write(tmp_path, "default", model="llama")
    with pytest.raises(UnsupportedModelError, match="'llama' is not supported yet"):
        load_tokenizer(path)


def test_unknown_pre_tokenizer_is_named(tmp_path):
    path, _ = _write(tmp_path, "falcon")
    with pytest.raises(UnsupportedModelError, match="'falcon'"):
        load_tokenizer(path)
