"""Llama 3.1-style RoPE scaling in GGUF files: the ``rope_freqs.weight`` tensor.

llama.cpp's converter does not store the ``llama3`` rope_scaling parameters; it stores one
float32 divisor per RoPE frequency. A model written that way must give the logits of the
Hugging Face model with the ``llama3`` scaling (the float64 NumPy model here).
"""

from __future__ import annotations

import math
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llm_files import gguf_bytes, permute_like_llama_cpp
from llm_reference_numpy import CONFIGS, forward, rel_err

from pygpukit import llm
from pygpukit.llm.random_model import random_weights

CFG = CONFIGS["llama3_tied"]  # llama3 scaling (factor 8, original context 32), tied head
HEAD_DIM = CFG["hidden_size"] // CFG["num_attention_heads"]

_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def llama31_freq_factors(cfg: dict[str, Any]) -> np.ndarray:
    """The divisors llama.cpp's converter writes for a ``llama3`` rope_scaling: 1 for short
    wavelengths, ``factor`` for long ones, a smooth blend between (Llama 3.1's rule)."""
    s = cfg["rope_scaling"]
    base, dim = cfg["rope_theta"], HEAD_DIM
    old = s["original_max_position_embeddings"]
    low, high, factor = s["low_freq_factor"], s["high_freq_factor"], s["factor"]
    factors = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * base ** (i / dim)
        if wavelen < old / high:
            factors.append(1.0)
        elif wavelen > old / low:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, np.float32)


def _write_gguf(path: Path, w: dict[str, np.ndarray], freqs: Any = None, kind: str = "F32"):
    """``w`` (HF names) as a llama GGUF, q/k rows permuted as llama.cpp stores them."""
    heads, kv = CFG["num_attention_heads"], CFG["num_key_value_heads"]
    meta = {
        "general.architecture": "llama",
        "llama.embedding_length": CFG["hidden_size"],
        "llama.feed_forward_length": CFG["intermediate_size"],
        "llama.block_count": CFG["num_hidden_layers"],
        "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": kv,
        "llama.attention.layer_norm_rms_epsilon": CFG["rms_norm_eps"],
        "llama.rope.freq_base": CFG["rope_theta"],
        "llama.context_length": CFG["max_position_embeddings"],
        "llama.vocab_size": CFG["vocab_size"],
    }
    tensors = []
    for name, a in w.items():
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        else:
            layer, rest = name.removeprefix("model.layers.").split(".", 1)
            gname = f"blk.{layer}.{_LAYER[rest]}"
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            a = permute_like_llama_cpp(a, heads if "q_proj" in name else kv)
        tensors.append((gname, a.shape, "F32", np.ascontiguousarray(a, np.float32).tobytes()))
    if freqs is not None:
        freqs = np.asarray(freqs)
        tensors.append(("rope_freqs.weight", freqs.shape, kind, freqs.tobytes()))
    path.write_bytes(gguf_bytes(meta, tensors))
    return path


@pytest.fixture
def weights(request: pytest.FixtureRequest) -> dict[str, np.ndarray]:
    seed = secrets.randbits(32)
    request.node.user_properties.append(("weights_seed", seed))
    return random_weights(CFG, seed)


def test_rope_freqs_give_the_llama3_scaled_model(tmp_path, weights, rng):
    factors = llama31_freq_factors(CFG)
    assert factors.min() == 1.0 and factors.max() == 8.0  # both ends and a blend are exercised
    assert ((factors > 1) & (factors < 8)).any()
    path = _write_gguf(tmp_path / "llama31.gguf", weights, factors)
    model = llm.load(path, dtype="float32", max_seq_len=128, progress=False)
    assert model.config.rope_freq_factors == tuple(factors.astype(np.float64))
    assert model.config.rope_scaling is None  # the factors alone carry the scaling
    assert model.tokenizer is None  # no tokenizer.ggml.* metadata: token ids only
    ids = rng.integers(3, 256, (2, 48))  # past the original context of 32: scaling matters
    want = forward(CFG, weights, ids)
    got = model.forward(ids).to_numpy()
    assert rel_err(got, want) < 1e-4
    plain = _write_gguf(tmp_path / "plain.gguf", weights)
    unscaled = llm.load(plain, dtype="float32", max_seq_len=128, progress=False)
    assert rel_err(unscaled.forward(ids).to_numpy(), want) > 1e-3  # the factors mattered
    # Prefill and cached decode use the same tables.
    prompt = ids[0, :8].tolist()
    got_ids = model.generate(prompt, max_new_tokens=6).token_ids
    seq = list(prompt)
    for t in got_ids:
        assert t == int(forward(CFG, weights, np.array([seq]))[0, -1].argmax())
        seq.append(t)


@pytest.mark.parametrize(
    ("freqs", "kind", "match"),
    [
        (np.ones(HEAD_DIM // 4, np.float32), "F32", r"must be F32 of shape \(32,\)"),
        (np.ones(HEAD_DIM // 2, np.float16), "F16", r"must be F32 of shape \(32,\)"),
        (np.r_[np.ones(HEAD_DIM // 2 - 1), 0.0].astype(np.float32), "F32", "not a positive"),
        (np.r_[np.ones(HEAD_DIM // 2 - 1), np.nan].astype(np.float32), "F32", "not a positive"),
    ],
    ids=["short", "f16", "zero", "nan"],
)
def test_bad_rope_freqs_are_refused(tmp_path, weights, freqs, kind, match):
    path = _write_gguf(tmp_path / "bad.gguf", weights, freqs, kind)
    with pytest.raises(llm.UnsupportedModelError, match=match) as info:
        llm.load(path, dtype="float32", max_seq_len=64, progress=False)
    assert "rope_freqs.weight" in str(info.value)


@pytest.mark.parametrize(
    "factors", [[1.0] * 3, [1.0] * 31 + [-2.0], "abc", [1.0] * 31 + [float("inf")]]
)
def test_config_checks_rope_freq_factors(factors):
    with pytest.raises(llm.UnsupportedModelError, match="rope_freq_factors must be"):
        llm.ModelConfig.from_dict({**CFG, "rope_freq_factors": factors})
