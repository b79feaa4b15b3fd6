"""An independent float64 NumPy forward pass of the Llama family, for the CPU tests.

Written from the model definitions (HF ``modeling_llama`` / ``qwen2`` / ``qwen3`` /
``mistral`` semantics), sharing nothing with ``pygpukit.llm`` but the RoPE frequency scalings
(``ops.rope_inv_freq``, tested on their own against the formulas).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pygpukit import ops

#: Small configurations of each family and feature (vocab 256, 2 layers, head_dim 64: the
#: smallest the attention kernels take). tools/llm_reference.py gives transformers the same.
_BASE: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _config(arch: str, model_type: str, heads: int, kv: int, **extra: Any) -> dict[str, Any]:
    return {**_BASE, "architectures": [arch], "model_type": model_type,
            "num_attention_heads": heads, "num_key_value_heads": kv, **extra}  # fmt: skip


CONFIGS: dict[str, dict[str, Any]] = {
    "llama3_tied": _config(
        "LlamaForCausalLM", "llama", 2, 1, rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
    ),
    "qwen2_bias": _config("Qwen2ForCausalLM", "qwen2", 2, 2, rope_theta=1e6),
    "qwen3_qknorm": _config(
        "Qwen3ForCausalLM", "qwen3", 4, 2, head_dim=64, rope_theta=1e6, tie_word_embeddings=True
    ),
    "mistral_window": _config("MistralForCausalLM", "mistral", 2, 1, sliding_window=8),
    "qwen2_yarn": _config(
        "Qwen2ForCausalLM", "qwen2", 2, 1, rope_theta=10000.0,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    ),
}  # fmt: skip


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """``x`` [B, S, H, D] rotated HF-style: ``x * cos + rotate_half(x) * sin``."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    c = np.concatenate([cos, cos], -1)[None, :, None, :]
    s = np.concatenate([sin, sin], -1)[None, :, None, :]
    return x * c + rotated * s


def forward(
    cfg: Mapping[str, Any], weights: Mapping[str, np.ndarray], ids: np.ndarray
) -> np.ndarray:
    """float64 logits ``[B, S, vocab]`` of token ids ``[B, S]``."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    arch = cfg["architectures"][0]
    heads, kv = (
        cfg["num_attention_heads"],
        cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
    )
    d = cfg.get("head_dim") or cfg["hidden_size"] // heads
    eps = cfg["rms_norm_eps"]
    b, s = ids.shape
    inv, att = ops.rope_inv_freq(
        d,
        cfg.get("rope_theta", 10000.0),
        cfg.get("rope_scaling"),
        max_position_embeddings=cfg["max_position_embeddings"],
    )
    angles = np.arange(s)[:, None] * inv[None, :]
    cos, sin = np.cos(angles) * att, np.sin(angles) * att
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    visible = j <= i
    if arch == "MistralForCausalLM" and cfg.get("sliding_window"):
        visible &= j > i - cfg["sliding_window"]
    x = w["model.embed_tokens.weight"][ids]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        proj = {}
        for name, nh in (("q", heads), ("k", kv), ("v", kv)):
            y = h @ w[p + f"self_attn.{name}_proj.weight"].T
            if p + f"self_attn.{name}_proj.bias" in w:
                y = y + w[p + f"self_attn.{name}_proj.bias"]
            proj[name] = y.reshape(b, s, nh, d)
        q, k, v = proj["q"], proj["k"], proj["v"]
        if arch == "Qwen3ForCausalLM":
            q = _rms(q, w[p + "self_attn.q_norm.weight"], eps)
            k = _rms(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k, v = np.repeat(k, heads // kv, axis=2), np.repeat(v, heads // kv, axis=2)
        scores = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(d)
        scores = np.where(visible, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        o = np.einsum("bhij,bjhd->bihd", probs, v).reshape(b, s, heads * d)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = _rms(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """``||got - ref|| / ||ref||`` over all elements, in float64."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
