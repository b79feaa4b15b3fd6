"""GGUF files written from the spec: metadata types, tensor layout, names, q/k permutation."""

from __future__ import annotations

import numpy as np
import pytest
from ggml_reference import dequantize_reference, quantize
from llm_files import (
    BOOL,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    STRING,
    U8,
    U16,
    U32,
    U64,
    gguf_bytes,
    permute_like_llama_cpp,
)

import pygpukit as gp
from pygpukit.llm.loading import open_checkpoint
from pygpukit.llm.loading.gguf import hf_name
from pygpukit.llm.loading.gguf_format import GGUFFile

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 64, 4, 2, 96, 40
HEAD_DIM = HIDDEN // HEADS


def _meta(arch: str = "llama", **extra):
    return {
        "general.architecture": arch,
        f"{arch}.embedding_length": HIDDEN,
        f"{arch}.feed_forward_length": FFN,
        f"{arch}.block_count": 1,
        f"{arch}.attention.head_count": HEADS,
        f"{arch}.attention.head_count_kv": KV_HEADS,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.rope.freq_base": 500000.0,
        f"{arch}.context_length": 4096,
        "tokenizer.ggml.eos_token_id": 3,
        "tokenizer.ggml.eot_token_id": 5,
        "tokenizer.ggml.bos_token_id": 1,
        **extra,
    }


def _hf_weights(rng):
    def w(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    return {
        "model.embed_tokens.weight": w(VOCAB, HIDDEN),
        "model.norm.weight": w(HIDDEN),
        "model.layers.0.input_layernorm.weight": w(HIDDEN),
        "model.layers.0.self_attn.q_proj.weight": w(HEADS * HEAD_DIM, HIDDEN),
        "model.layers.0.self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
        "model.layers.0.self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
        "model.layers.0.self_attn.o_proj.weight": w(HIDDEN, HEADS * HEAD_DIM),
        "model.layers.0.post_attention_layernorm.weight": w(HIDDEN),
        "model.layers.0.mlp.gate_proj.weight": w(FFN, HIDDEN),
        "model.layers.0.mlp.up_proj.weight": w(FFN, HIDDEN),
        "model.layers.0.mlp.down_proj.weight": w(HIDDEN, FFN),
    }


_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
    "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "model.layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "model.layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "model.layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "model.layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight",
}


def _as_gguf(hf, kind, permute=True):
    """(gguf tensors, the values the loader must return) for HF weights stored as ``kind``."""
    tensors, expected = [], {}
    for name, w in hf.items():
        stored = w
        if permute and name.endswith("q_proj.weight"):
            stored = permute_like_llama_cpp(w, HEADS)
        if permute and name.endswith("k_proj.weight"):
            stored = permute_like_llama_cpp(w, KV_HEADS)
        k = kind if w.ndim == 2 else "F32"  # llama.cpp keeps norms in F32
        if k in ("Q8_0", "Q4_0", "Q4_1"):
            raw = quantize(stored, k)
            values = dequantize_reference(raw, k).reshape(w.shape)
        else:
            dt = {"F32": np.float32, "F16": np.float16, "BF16": gp.bfloat16}[k]
            raw = np.frombuffer(stored.astype(dt).tobytes(), np.uint8)
            values = stored.astype(dt).astype(np.float32)
        if permute and name.endswith("q_proj.weight"):
            values = _unpermute(values, HEADS)
        if permute and name.endswith("k_proj.weight"):
            values = _unpermute(values, KV_HEADS)
        tensors.append((_GGUF_NAMES[name], w.shape, k, raw.tobytes()))
        expected[name] = values
    return tensors, expected


def _unpermute(w, heads):
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_metadata_value_types_and_arrays(tmp_path):
    meta = {
        "general.architecture": "llama",
        "u8": (U8, 200),
        "i8": (I8, -100),
        "u16": (U16, 60000),
        "i16": (I16, -30000),
        "u32": (U32, 4_000_000_000),
        "i32": (I32, -2_000_000_000),
        "f32": (F32, 0.1),
        "bool": (BOOL, True),
        "string": (STRING, "héllo ✓"),
        "u64": (U64, 2**63 + 5),
        "i64": (I64, -(2**62)),
        "f64": (F64, 0.1),
        "ints": [1, 2, 3],
        "floats": [0.5, 0.25],
        "strings": ["a", "", "ü"],
        "nested": [[1, 2], [3]],
        "empty": [],
    }
    path = tmp_path / "m.gguf"
    for version in (2, 3):
        path.write_bytes(gguf_bytes(meta, [], version=version))
        f = GGUFFile(path)
        assert f.version == version
        md = f.metadata
        assert md["u8"] == 200 and md["i8"] == -100 and md["u16"] == 60000
        assert md["i16"] == -30000 and md["u32"] == 4_000_000_000
        assert md["i32"] == -2_000_000_000 and md["u64"] == 2**63 + 5 and md["i64"] == -(2**62)
        assert md["f32"] == 0.1 and md["f64"] == 0.1 and md["bool"] is True
        assert md["string"] == "héllo ✓"
        assert md["ints"] == [1, 2, 3] and md["floats"] == [0.5, 0.25]
        assert md["strings"] == ["a", "", "ü"] and md["nested"] == [[1, 2], [3]]
        assert md["empty"] == []
        f.close()


@pytest.mark.parametrize("alignment", [32, 64])
def test_tensor_infos_offsets_and_alignment(tmp_path, rng, alignment):
    a = rng.standard_normal((3, 5, 32)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float16)
    meta = {"general.alignment": (U32, alignment)} if alignment != 32 else {}
    tensors = [("a", a.shape, "F32", a.tobytes()), ("b", b.shape, "F16", b.tobytes())]
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(meta, tensors, alignment=alignment))
    f = GGUFFile(path)
    assert f.tensors["a"].shape == (3, 5, 32) and f.tensors["a"].type_name == "F32"
    assert f.tensors["b"].offset % alignment == 0
    np.testing.assert_array_equal(f.raw("a").view(np.float32).reshape(a.shape), a)
    np.testing.assert_array_equal(f.raw("b").view(np.float16), b)


@pytest.mark.parametrize("kind", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_llama_gguf_loads_with_hf_names_and_rows_unpermuted(tmp_path, rng, kind, dtype):
    hf = _hf_weights(rng)
    tensors, expected = _as_gguf(hf, kind)
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(_meta(), tensors))
    with open_checkpoint(path) as ck:
        assert ck.format == "gguf"
        assert set(ck.tensor_names()) == set(hf)
        assert ck.tensor_infos()["model.layers.0.mlp.up_proj.weight"].shape == (FFN, HIDDEN)
        loaded = ck.load(dtype, progress=False)
    for name, values in expected.items():
        got = loaded[name]
        assert got.shape == hf[name].shape and got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.to_numpy(), values.astype(dtype), err_msg=name)
    if kind == "F32" and dtype == "float32":  # lossless: q/k unpermuted are the HF weights
        q = loaded["model.layers.0.self_attn.q_proj.weight"].to_numpy().astype(np.float32)
        np.testing.assert_array_equal(q, hf["model.layers.0.self_attn.q_proj.weight"])


def test_qwen2_rows_are_not_permuted_and_bias_maps(tmp_path, rng):
    hf = _hf_weights(rng)
    tensors, _ = _as_gguf(hf, "F32", permute=False)
    bias = rng.standard_normal(HEADS * HEAD_DIM).astype(np.float32)
    tensors.append(("blk.0.attn_q.bias", bias.shape, "F32", bias.tobytes()))
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(_meta("qwen2"), tensors))
    with open_checkpoint(path) as ck:
        assert ck.hf_config["architectures"] == ["Qwen2ForCausalLM"]
        assert ck.hf_config["attention_bias"] is True
        loaded = ck.load("float32", progress=False)
    np.testing.assert_array_equal(
        loaded["model.layers.0.self_attn.q_proj.weight"].to_numpy(),
        hf["model.layers.0.self_attn.q_proj.weight"],
    )
    np.testing.assert_array_equal(loaded["model.layers.0.self_attn.q_proj.bias"].to_numpy(), bias)


def test_config_from_metadata(tmp_path, rng):
    tensors, _ = _as_gguf(_hf_weights(rng), "F32")
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(_meta(**{"llama.vocab_size": VOCAB}), tensors))
    with open_checkpoint(path) as ck:
        c = ck.hf_config
        assert c["architectures"] == ["LlamaForCausalLM"] and c["model_type"] == "llama"
        assert (c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]) == (
            HIDDEN,
            FFN,
            1,
        )
        assert (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]) == (
            HEADS,
            KV_HEADS,
            HEAD_DIM,
        )
        assert c["rms_norm_eps"] == 1e-5 and c["rope_theta"] == 500000.0
        assert c["vocab_size"] == VOCAB and c["max_position_embeddings"] == 4096
        assert c["tie_word_embeddings"] is True and "lm_head.weight" not in ck.tensor_names()
        assert c["bos_token_id"] == 1 and c["eos_token_id"] == 3
        assert ck.generation_config["eos_token_id"] == [3, 5]


def test_untied_output_maps_to_lm_head(tmp_path, rng):
    hf = {**_hf_weights(rng), "lm_head.weight": rng.standard_normal((VOCAB, HIDDEN))}
    hf["lm_head.weight"] = hf["lm_head.weight"].astype(np.float32)
    tensors, _ = _as_gguf(hf, "F16")
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(_meta(), tensors))
    with open_checkpoint(path) as ck:
        assert ck.hf_config["tie_word_embeddings"] is False
        assert ck.tensor_infos()["lm_head.weight"].shape == (VOCAB, HIDDEN)


def test_name_table():
    assert hf_name("blk.12.attn_k_norm.weight") == "model.layers.12.self_attn.k_norm.weight"
    assert hf_name("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight"
    assert hf_name("output.weight") == "lm_head.weight"
    assert hf_name("blk.0.ssm_a") is None and hf_name("rope_freqs.weight") is None


def test_gguf_weights_are_read_only(tmp_path, rng):
    tensors, _ = _as_gguf(_hf_weights(rng), "Q4_1")
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(_meta(), tensors))
    with open_checkpoint(path) as ck:
        weights = ck.load("bfloat16", progress=False)
    assert not any(w.flags.writeable for w in weights.values())
