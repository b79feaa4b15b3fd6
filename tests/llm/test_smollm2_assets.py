"""The real SmolLM2-135M-Instruct Q4_1 GGUF: metadata, config, tokenizer, chat template, and
every tensor loaded on the current backend with the shapes the config implies."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from ggml_reference import dequantize_reference
from smollm2_asset import SHA256

from pygpukit.llm.loading import open_checkpoint
from pygpukit.llm.tokenizer import load_tokenizer

CHAT_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
TEXTS = [
    "What is the capital of France?",
    "  leading spaces, tabs\tand\nnewlines\n\n",
    "Numbers 1234567890 and 3.14159, code: def f(x): return x**2",
    "Ünïcödé: café, naïve, 日本語, русский, emoji 🙂🚀👩‍💻",
    "<|im_start|>user\nHi<|im_end|>",
]


@pytest.fixture(scope="module")
def checkpoint(smollm2_path):
    with open_checkpoint(smollm2_path) as ck:
        yield ck


@pytest.fixture(scope="module")
def tokenizer(smollm2_path):
    return load_tokenizer(smollm2_path)


def test_gguf_metadata_and_config(checkpoint):
    md = checkpoint.metadata
    assert checkpoint.file.version == 3
    assert md["general.architecture"] == "llama"
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "smollm"
    c = checkpoint.hf_config
    assert c["architectures"] == ["LlamaForCausalLM"]
    assert (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]) == (576, 1536, 30)
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (9, 3, 64)
    assert c["vocab_size"] == 49152 and c["max_position_embeddings"] == 8192
    assert c["rope_theta"] == 100000.0 and c["rms_norm_eps"] == 1e-5
    assert c["rope_scaling"] is None and c["tie_word_embeddings"] is True
    assert (c["bos_token_id"], c["eos_token_id"]) == (1, 2)
    assert checkpoint.generation_config["eos_token_id"] == [2]


def test_tensor_names_and_types(checkpoint):
    infos = checkpoint.tensor_infos()
    assert len(infos) == 2 + 30 * 9
    assert "lm_head.weight" not in infos  # tied to the embedding
    assert infos["model.embed_tokens.weight"].stored == "Q8_0"
    assert infos["model.layers.7.mlp.down_proj.weight"].stored == "Q4_1"
    assert infos["model.layers.29.post_attention_layernorm.weight"].stored == "F32"


def test_tokenizer_specials_and_chat_template(tokenizer):
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_ids == (2,)
    assert tokenizer.token_to_id("<|im_start|>") == 1 and tokenizer.vocab_size == 49152
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}]
    )
    assert prompt == CHAT_PROMPT
    with_system = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        add_generation_prompt=False,
    )
    assert (
        with_system == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    )
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert ids.count(1) == 3 and ids.count(2) == 2  # <|im_start|>, <|im_end|> as single ids
    assert ids[-4:] == tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)


@pytest.mark.parametrize("text", TEXTS)
def test_encode_decode_round_trip(tokenizer, text):
    ids = tokenizer.encode(text)
    assert ids and all(0 <= i < tokenizer.vocab_size for i in ids)
    assert tokenizer.decode(ids) == text
    d = tokenizer.detokenizer(skip_special_tokens=False)
    pieces = [d.add(i) for i in ids] + [d.flush()]
    assert "".join(pieces) == text and all("\ufffd" not in p for p in pieces)


def test_digits_are_split_one_by_one(tokenizer):
    # The smollm pre-tokenizer isolates every digit before BPE.
    ids = tokenizer.encode("2024", add_special_tokens=False)
    assert [tokenizer.decode([i]) for i in ids] == ["2", "0", "2", "4"]


def test_every_tensor_loads_with_config_shapes(checkpoint):
    c = checkpoint.hf_config
    hidden, ffn, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    expected = {
        "model.embed_tokens.weight": (c["vocab_size"], hidden),
        "model.norm.weight": (hidden,),
    }
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        expected |= {
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (q, hidden),
            p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.weight": (kv, hidden),
            p + "self_attn.o_proj.weight": (hidden, q),
            p + "mlp.gate_proj.weight": (ffn, hidden),
            p + "mlp.up_proj.weight": (ffn, hidden),
            p + "mlp.down_proj.weight": (hidden, ffn),
        }
    weights = checkpoint.load("bfloat16", progress=False)
    assert {n: w.shape for n, w in weights.items()} == expected
    assert all(str(w.dtype) == "bfloat16" for w in weights.values())
    norm = weights["model.layers.0.input_layernorm.weight"].to_numpy().astype(np.float32)
    assert np.isfinite(norm).all() and np.abs(norm).max() > 0


def test_quantized_tensor_matches_the_reference(checkpoint):
    # v_proj: Q4_1, not permuted; k_proj: Q4_1 with llama.cpp's row order undone.
    for name, heads in [("v_proj", None), ("k_proj", 3)]:
        hf = f"model.layers.3.self_attn.{name}.weight"
        raw = checkpoint.file.raw(checkpoint.gguf_name(hf))
        ref = dequantize_reference(raw, "Q4_1").reshape(192, 576)
        if heads:
            ref = ref.reshape(heads, 32, 2, 576).swapaxes(1, 2).reshape(192, 576)
        got = checkpoint.load("float32", names=[hf], progress=False)[hf].to_numpy()
        np.testing.assert_array_equal(got, ref)


REFERENCE = pathlib.Path(__file__).parent / "references" / "smollm2_tokenizer.json"


@pytest.fixture(scope="module")
def transformers_reference():
    if not REFERENCE.is_file():
        pytest.skip(f"{REFERENCE.name} not written yet (tools/llm_reference_gguf.py tokenizer)")
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    assert reference["gguf_sha256"] == SHA256
    return reference


def test_ids_match_transformers(tokenizer, transformers_reference):
    for case in transformers_reference["texts"]:
        assert tokenizer.encode(case["text"], add_special_tokens=False) == case["ids"], case
    # transformers' GGUF conversion reports <|im_start|> (1) as eos; the file's metadata and
    # llama.cpp say <|im_end|> (2), the token a chat turn ends with, which generation stops on.
    assert tokenizer.eos_token_id == tokenizer.encode("<|im_end|>", add_special_tokens=False)[0]


def test_chat_template_matches_transformers(tokenizer, transformers_reference):
    for case in transformers_reference["chats"]:
        text = tokenizer.apply_chat_template(
            case["messages"], add_generation_prompt=case["add_generation_prompt"]
        )
        assert text == case["text"]
        assert tokenizer.encode(text, add_special_tokens=False) == case["ids"]
