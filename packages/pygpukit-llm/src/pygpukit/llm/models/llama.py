"""The Llama-family decoder: Llama 2/3/3.1/3.2, SmolLM/SmolLM2, Qwen2/2.5/3 and Mistral.

One implementation; the families differ only in :class:`~pygpukit.llm.config.ModelConfig` flags
(q/k/v bias, q/k RMSNorm, explicit head dim, sliding window, tied embeddings, RoPE scaling).
Weights arrive under their Hugging Face names; q/k/v and gate/up are fused into one matrix each
at load, so a layer runs two GEMVs for attention in and MLP in instead of five.

Attention is a strategy passed to :meth:`LlamaModel.hidden_states` (no cache, prefill into the
cache, one decode step over it), so prefill, decode and the cache-free ``forward`` share every
other line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray
from pygpukit.ops.linear import linear

from ..config import ModelConfig
from ..errors import CheckpointError

__all__ = ["Attend", "LayerWeights", "LlamaModel", "checkpoint_tensors"]

#: Fused per-layer weights: name -> the HF tensors (under ``model.layers.{i}.``) stacked by rows.
FUSED: dict[str, tuple[str, ...]] = {
    "qkv": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
    "qkv_bias": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
    "gate_up": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
}
#: Per-layer weights used as stored: name -> HF tensor under ``model.layers.{i}.``.
PLAIN: dict[str, str] = {
    "input_norm": "input_layernorm.weight",
    "o_proj": "self_attn.o_proj.weight",
    "o_bias": "self_attn.o_proj.bias",
    "q_norm": "self_attn.q_norm.weight",
    "k_norm": "self_attn.k_norm.weight",
    "post_norm": "post_attention_layernorm.weight",
    "down": "mlp.down_proj.weight",
}
EMBED, FINAL_NORM, LM_HEAD = "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"

#: ``attend(layer, q, k, v) -> [B, S, Hq * D]`` with q ``[B, S, Hq, D]`` and k/v ``[B, S, Hkv,
#: D]`` after RoPE.
Attend = Callable[[int, GPUArray, GPUArray, GPUArray], GPUArray]


def checkpoint_tensors(cfg: ModelConfig) -> Iterator[tuple[str, tuple[int, ...], str]]:
    """``(HF name, shape, kind)`` of every tensor the model reads, in a fixed order.

    ``kind`` is ``embed``, ``linear``, ``bias`` or ``norm``.
    """
    h, d = cfg.hidden_size, cfg.head_dim
    yield EMBED, (cfg.vocab_size, h), "embed"
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        yield p + PLAIN["input_norm"], (h,), "norm"
        for name, rows in zip(FUSED["qkv"], (cfg.q_size, cfg.kv_size, cfg.kv_size), strict=True):
            yield p + name, (rows, h), "linear"
            if cfg.qkv_bias:
                yield p + name.replace(".weight", ".bias"), (rows,), "bias"
        yield p + PLAIN["o_proj"], (h, cfg.q_size), "linear"
        if cfg.o_bias:
            yield p + PLAIN["o_bias"], (h,), "bias"
        if cfg.qk_norm:
            yield p + PLAIN["q_norm"], (d,), "norm"
            yield p + PLAIN["k_norm"], (d,), "norm"
        yield p + PLAIN["post_norm"], (h,), "norm"
        yield p + FUSED["gate_up"][0], (cfg.intermediate_size, h), "linear"
        yield p + FUSED["gate_up"][1], (cfg.intermediate_size, h), "linear"
        yield p + PLAIN["down"], (h, cfg.intermediate_size), "linear"
    yield FINAL_NORM, (h,), "norm"
    if not cfg.tie_word_embeddings:
        yield LM_HEAD, (cfg.vocab_size, h), "linear"


def check_shapes(cfg: ModelConfig, shapes: Mapping[str, tuple[int, ...]], source: str) -> None:
    """Raise :class:`CheckpointError` for a missing tensor or a shape the config contradicts."""
    for name, shape, _ in checkpoint_tensors(cfg):
        if name not in shapes:
            raise CheckpointError(
                f"{source}: tensor {name!r} is missing ({cfg.architecture} with "
                f"{cfg.num_layers} layers needs it)",
                path=source,
                tensor=name,
            )
        if tuple(shapes[name]) != shape:
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {tuple(shapes[name])} but config.json "
                f"implies {shape}; the config and the weights belong to different models",
                path=source,
                tensor=name,
            )


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's weights, q/k/v and gate/up fused."""

    input_norm: GPUArray
    qkv: GPUArray
    qkv_bias: GPUArray | None
    o_proj: GPUArray
    o_bias: GPUArray | None
    q_norm: GPUArray | None
    k_norm: GPUArray | None
    post_norm: GPUArray
    gate_up: GPUArray
    down: GPUArray


def _layer(cfg: ModelConfig, w: dict[str, GPUArray], i: int) -> LayerWeights:
    """Take layer ``i``'s tensors out of ``w`` (so unfused copies are freed as we go)."""
    p = f"model.layers.{i}."

    def fuse(key: str) -> GPUArray | None:
        parts = [w.pop(p + n, None) for n in FUSED[key]]
        if any(x is None for x in parts):
            return None
        return gp.concatenate(parts, axis=0)

    def plain(key: str) -> GPUArray | None:
        return w.pop(p + PLAIN[key], None)

    qkv, gate_up = fuse("qkv"), fuse("gate_up")
    assert qkv is not None and gate_up is not None  # check_shapes ran first
    return LayerWeights(
        input_norm=w.pop(p + PLAIN["input_norm"]),
        qkv=qkv,
        qkv_bias=fuse("qkv_bias") if cfg.qkv_bias else None,
        o_proj=w.pop(p + PLAIN["o_proj"]),
        o_bias=plain("o_bias") if cfg.o_bias else None,
        q_norm=plain("q_norm") if cfg.qk_norm else None,
        k_norm=plain("k_norm") if cfg.qk_norm else None,
        post_norm=w.pop(p + PLAIN["post_norm"]),
        gate_up=gate_up,
        down=w.pop(p + PLAIN["down"]),
    )


class LlamaModel:
    """Weights, RoPE tables and the layer math of a Llama-family decoder.

    ``weights`` (HF names, GPUArrays of one dtype) is consumed: the fused matrices replace the
    parts. ``max_positions`` sizes the RoPE tables (positions ``0 .. max_positions - 1``).
    """

    def __init__(
        self, cfg: ModelConfig, weights: dict[str, GPUArray], max_positions: int, source: str = ""
    ) -> None:
        check_shapes(cfg, {k: tuple(v.shape) for k, v in weights.items()}, source or "weights")
        self.config = cfg
        self.dtype = weights[EMBED].dtype
        w = dict(weights)
        self.embed = w.pop(EMBED)
        self.layers = [_layer(cfg, w, i) for i in range(cfg.num_layers)]
        self.norm = w.pop(FINAL_NORM)
        self.lm_head = self.embed if cfg.tie_word_embeddings else w.pop(LM_HEAD)
        inv_freq, factor = ops.rope_inv_freq(
            cfg.head_dim,
            cfg.rope_theta,
            cfg.rope_scaling,
            max_position_embeddings=cfg.max_position_embeddings,
        )
        self.cos, self.sin = ops.rope_cos_sin(
            max_positions, cfg.head_dim, inv_freq=inv_freq, attention_factor=factor
        )
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        for a in self.weights():
            a.setflags(write=False)  # weights are immutable, the fused ones included

    def weights(self) -> list[GPUArray]:
        """Every weight array once (a tied head is the embedding)."""
        arrays = [self.embed, self.norm] + ([] if self.lm_head is self.embed else [self.lm_head])
        for lw in self.layers:
            arrays += [a for a in vars(lw).values() if a is not None]
        return arrays

    def weight_bytes(self) -> int:
        """Bytes of weights one decode step reads.

        All of them but the embedding table (one row of it is read), unless the head is tied.
        """
        arrays = [a for a in self.weights() if a is not self.embed or a is self.lm_head]
        return sum(a.nbytes for a in arrays)

    def _qkv(
        self, lw: LayerWeights, x: GPUArray, positions: GPUArray
    ) -> tuple[GPUArray, GPUArray, GPUArray]:
        cfg = self.config
        b, s = x.shape[0], x.shape[1]
        qkv = linear(x, lw.qkv, lw.qkv_bias)
        qs, kvs = cfg.q_size, cfg.kv_size
        q = qkv[..., :qs].contiguous().reshape(b, s, cfg.num_heads, cfg.head_dim)
        k = qkv[..., qs : qs + kvs].contiguous().reshape(b, s, cfg.num_kv_heads, cfg.head_dim)
        v = qkv[..., qs + kvs :].contiguous().reshape(b, s, cfg.num_kv_heads, cfg.head_dim)
        if lw.q_norm is not None and lw.k_norm is not None:
            q = ops.rmsnorm(q, lw.q_norm, cfg.rms_norm_eps)
            k = ops.rmsnorm(k, lw.k_norm, cfg.rms_norm_eps)
        ops.apply_rope(q, k, self.cos, self.sin, positions, inplace=True)
        return q, k, v

    def hidden_states(self, ids: GPUArray, positions: GPUArray, attend: Attend) -> GPUArray:
        """The final-norm hidden states ``[B, S, hidden]`` of token ids ``[B, S]`` (int32)."""
        eps = self.config.rms_norm_eps
        h = ops.embedding(ids, self.embed)
        residual, x = h, ops.rmsnorm(h, self.layers[0].input_norm, eps)
        for i, lw in enumerate(self.layers):
            q, k, v = self._qkv(lw, x, positions)
            a = linear(attend(i, q, k, v), lw.o_proj, lw.o_bias)
            residual, x = ops.add_rmsnorm(a, residual, lw.post_norm, eps)
            m = linear(ops.silu_mul(linear(x, lw.gate_up)), lw.down)
            nxt = self.layers[i + 1].input_norm if i + 1 < len(self.layers) else self.norm
            residual, x = ops.add_rmsnorm(m, residual, nxt, eps)
        return x

    def logits(self, x: GPUArray) -> GPUArray:
        """``x @ lm_head.T`` in the model dtype: ``[..., vocab]``."""
        return linear(x, self.lm_head)

    def window_mask(self, s: int) -> GPUArray | None:
        """The additive ``[S, S]`` mask of causal sliding-window attention, None without one.

        Key ``j`` is visible to query ``i`` when ``i - window < j <= i`` (transformers' rule).
        """
        w = self.config.sliding_window
        if w is None or s <= w:
            return None
        i, j = np.arange(s)[:, None], np.arange(s)[None, :]
        return gp.from_numpy(np.where((j <= i) & (j > i - w), 0.0, -np.inf).astype(np.float32))

    def attend_uncached(
        self,
        mask: GPUArray | None,
        store: Callable[[int, GPUArray, GPUArray], None] | None = None,
    ) -> Attend:
        """Attention of a sequence over itself: ``forward``, and prefill.

        In prefill ``store(layer, k, v)`` also writes the ``[B, Hkv, S, D]`` keys and values
        into a cache.
        """

        def attend(i: int, q: GPUArray, k: GPUArray, v: GPUArray) -> GPUArray:
            b, s = q.shape[0], q.shape[1]
            qt, kt, vt = (t.transpose(0, 2, 1, 3).contiguous() for t in (q, k, v))
            if store is not None:
                store(i, kt, vt)
            o = ops.scaled_dot_product_attention(
                qt, kt, vt, attn_mask=mask, is_causal=mask is None, scale=self.scale
            )
            return o.transpose(0, 2, 1, 3).contiguous().reshape(b, s, self.config.q_size)

        return attend
