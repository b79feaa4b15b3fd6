"""The Llama-family decoder: Llama 2/3/3.1/3.2, SmolLM/SmolLM2, Qwen2/2.5/3 and Mistral.

One implementation; the families differ only in :class:`~pygpukit.llm.config.ModelConfig` flags
(q/k/v bias, q/k RMSNorm, explicit head dim, sliding window, tied embeddings, RoPE scaling).
Weights arrive under their Hugging Face names and become :mod:`pygpukit.ops.layers` at load:
q/k/v and gate/up fused into one ``Linear`` each (two GEMVs for attention in and MLP in instead
of five), norms with the residual add fused in, one ``Rotary`` and one ``Attention`` for the
model. Each layer plans a launch at the first call with a shape and keeps it, so a decode step
(after the first) makes no plan.

Attention is a strategy passed to :meth:`LlamaModel.hidden_states` (no cache, prefill into the
cache, one decode step over it), so prefill, decode and the cache-free ``forward`` share every
other line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray
from pygpukit.ops.layers import Attention, Embedding, GatedMLP, Linear, RMSNorm, Rotary
from pygpukit.ops.rope import rope_kv_append_plan

from ..config import ModelConfig
from ..errors import CheckpointError

__all__ = ["Attend", "DecoderLayer", "LlamaModel", "check_shapes", "checkpoint_tensors"]

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
class DecoderLayer:
    """One decoder layer as :mod:`pygpukit.ops.layers`: q/k/v and gate/up fused."""

    input_norm: RMSNorm
    qkv: Linear
    q_norm: RMSNorm | None
    k_norm: RMSNorm | None
    o_proj: Linear
    post_norm: RMSNorm
    mlp: GatedMLP

    def weights(self) -> list[GPUArray]:
        """The layer's weight arrays (the fused ones as fused)."""
        arrays = [self.input_norm.weight, self.qkv.weight, self.qkv.bias, self.o_proj.weight]
        arrays += [self.o_proj.bias, self.post_norm.weight]
        arrays += [n.weight for n in (self.q_norm, self.k_norm) if n is not None]
        arrays += [self.mlp.gate_up.weight, self.mlp.down.weight]
        return [a for a in arrays if a is not None]


def _layer(cfg: ModelConfig, w: dict[str, GPUArray], i: int) -> DecoderLayer:
    """Build layer ``i`` from ``w``, popping its tensors (unfused parts are freed as we go)."""
    p = f"model.layers.{i}."
    eps = cfg.rms_norm_eps

    def take(name: str) -> GPUArray:
        return w.pop(p + name)

    def norm(key: str) -> RMSNorm:
        return RMSNorm(take(PLAIN[key]), eps)

    qkv_bias = [take(n) for n in FUSED["qkv_bias"]] if cfg.qkv_bias else None
    return DecoderLayer(
        input_norm=norm("input_norm"),
        qkv=Linear.fused([take(n) for n in FUSED["qkv"]], qkv_bias),
        q_norm=norm("q_norm") if cfg.qk_norm else None,
        k_norm=norm("k_norm") if cfg.qk_norm else None,
        o_proj=Linear(take(PLAIN["o_proj"]), take(PLAIN["o_bias"]) if cfg.o_bias else None),
        post_norm=norm("post_norm"),
        mlp=GatedMLP(take(FUSED["gate_up"][0]), take(FUSED["gate_up"][1]), take(PLAIN["down"])),
    )


def _rotary_tables(cfg: ModelConfig, max_positions: int) -> Rotary:
    """The model's :class:`Rotary`: ``rope_theta``, its scaling and per-frequency factors."""
    inv_freq, factor = ops.rope_inv_freq(
        cfg.head_dim,
        cfg.rope_theta,
        cfg.rope_scaling,
        max_position_embeddings=cfg.max_position_embeddings,
    )
    if cfg.rope_freq_factors is not None:
        inv_freq = inv_freq / np.asarray(cfg.rope_freq_factors, np.float64)
    return Rotary(
        cfg.head_dim,
        base=cfg.rope_theta,
        max_positions=max_positions,
        inv_freq=inv_freq,
        attention_factor=factor,
    )


class LlamaModel:
    """The layers of a Llama-family decoder (:mod:`pygpukit.ops.layers`) and its forward math.

    ``weights`` (HF names, GPUArrays of one dtype) is consumed: the fused matrices replace the
    parts. ``max_positions`` sizes the RoPE tables (positions ``0 .. max_positions - 1``).
    The head (``lm_head``, or the embedding table when tied) returns float32 logits.
    """

    def __init__(
        self, cfg: ModelConfig, weights: dict[str, GPUArray], max_positions: int, source: str = ""
    ) -> None:
        check_shapes(cfg, {k: tuple(v.shape) for k, v in weights.items()}, source or "weights")
        self.config = cfg
        self.dtype = weights[EMBED].dtype
        w = dict(weights)
        table = w.pop(EMBED)
        self.embed = Embedding(table)
        self.layers = [_layer(cfg, w, i) for i in range(cfg.num_layers)]
        self.norm = RMSNorm(w.pop(FINAL_NORM), cfg.rms_norm_eps)
        head = table if cfg.tie_word_embeddings else w.pop(LM_HEAD)
        self.lm_head = Linear(head, out_dtype=gp.float32)
        self.rotary = _rotary_tables(cfg, max_positions)
        self.attention = Attention(
            cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, sliding_window=cfg.sliding_window
        )
        for a in self.weights():
            a.setflags(write=False)  # weights are immutable, the fused ones included

    def weights(self) -> list[GPUArray]:
        """Every weight array once (a tied head is the embedding)."""
        table, head = self.embed.table, self.lm_head.weight
        arrays = [table, self.norm.weight] + ([] if head is table else [head])
        for layer in self.layers:
            arrays += layer.weights()
        return arrays

    def _qkv(
        self, layer: DecoderLayer, x: GPUArray, positions: GPUArray
    ) -> tuple[GPUArray, GPUArray, GPUArray]:
        """The rotated q ``[B, S, Hq, D]``, k and v ``[B, S, Hkv, D]`` of ``x``."""
        cfg = self.config
        b, s = x.shape[0], x.shape[1]
        heads = (cfg.num_heads, cfg.num_kv_heads, cfg.num_kv_heads)
        # One token: the parts are contiguous views of the projection (no copy).
        q, k, v = (
            t.contiguous().reshape(b, s, h, cfg.head_dim)
            for t, h in zip(layer.qkv.split(layer.qkv(x)), heads, strict=True)
        )
        if layer.q_norm is not None and layer.k_norm is not None:
            layer.q_norm(q, out=q)
            layer.k_norm(k, out=k)
        self.rotary(q, k, positions)
        return q, k, v

    def hidden_states(
        self,
        ids: GPUArray,
        positions: GPUArray,
        attend: Attend,
        *,
        last_position_only: bool = False,
        last_row: GPUArray | None = None,
    ) -> GPUArray:
        """The final-norm hidden states ``[B, S, hidden]`` of token ids ``[B, S]`` (int32).

        ``last_position_only`` (a prefill that wants the next token only): ``[B, 1, hidden]``,
        the last position's. The last layer still projects every position to q/k/v (its keys
        and values go to the cache) but attends with the last query only, and runs its output
        projection, MLP and the final norm on that one row: about 1/L of the prompt's matmul
        work that nothing reads.

        ``last_row`` (int32 ``[1]`` on the device, with ``B == 1``): the same for the row it
        holds instead of the last, for a prompt padded to a fixed length (a captured prefill
        reads the row from device memory). The last layer attends with every query then (the
        rows after it are padding that causal attention keeps out of it) and keeps that row.
        """
        h = self.embed(ids)
        residual, x = h, self.layers[0].input_norm(h)
        # A strategy that takes the q/k/v projection itself (prefill) skips the split copies.
        project = getattr(attend, "from_projection", None)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            trim = (last_position_only or last_row is not None) and i == last
            last_query = trim and last_row is None
            if project is not None and layer.q_norm is None and self._fused_rope_ok(positions):
                o = project(i, layer.qkv(x), positions, last_query_only=last_query)
            else:
                q, k, v = self._qkv(layer, x, positions)
                o = attend(i, q[:, -1:] if last_query else q, k, v)
            if trim and last_row is not None:  # that row of the attention and residual streams
                o, residual = (_row(t, last_row) for t in (o, residual))
            elif trim:  # the residual stream of the last position only
                residual = residual[:, -1:].contiguous()
            residual, x = layer.post_norm(layer.o_proj(o), residual)
            nxt = self.layers[i + 1].input_norm if i + 1 < len(self.layers) else self.norm
            residual, x = nxt(layer.mlp(x), residual)
        return x

    def logits(self, x: GPUArray) -> GPUArray:
        """float32 logits ``[..., vocab]`` of final hidden states ``x`` ``[..., hidden]``.

        Up to ``GEMV_MAX_ROWS`` rows in float16/bfloat16 (every decode and prefill step) are the
        GEMV kernel's float32 sums unrounded: rounded to bfloat16 (steps of 0.125 near a logit
        of 25) the two best tokens of a real model can tie, and the argmax then picks the lower
        id instead of the better one. More rows (``forward``) are rounded to the model dtype
        first, as transformers does in that dtype (:class:`~pygpukit.ops.layers.Linear`'s
        ``out_dtype``).
        """
        return self.lm_head(x)

    def _fused_rope_ok(self, positions: GPUArray) -> bool:
        """Whether prefill can split and rotate the projection in one step.

        True when :func:`pygpukit.ops.rope_kv_append` applies this model's RoPE: the whole head
        rotated, NeoX pairs, int32 ``[B, S]`` positions.
        """
        r = self.rotary
        return (
            r.rotary_dim == self.config.head_dim
            and r.layout == "neox"
            and positions.ndim == 2
            and positions.dtype == np.int32
        )

    def attend_uncached(
        self,
        store: Callable[[int, GPUArray, GPUArray], None] | None = None,
        cache: tuple[list[GPUArray], list[GPUArray]] | None = None,
        slots: GPUArray | None = None,
    ) -> Attend:
        """Attention of a sequence over itself (its sliding window, if any): ``forward``, prefill.

        In prefill ``store(layer, k, v)`` also writes the ``[B, Hkv, S, D]`` keys and values
        into a cache; or, with ``cache`` (per layer, the keys and values ``[B, Hkv, capacity,
        D]``, holding at least the prompt), they are written straight into slots ``0 .. S - 1``
        of it and attention reads them there. ``slots``: those slots as int32 ``[B, S]`` on the
        device, when the caller has them already (a prompt's positions are the same numbers);
        by default they are uploaded at the first layer.
        """
        return _UncachedAttend(self, store, cache, slots)


def _row(x: GPUArray, row: GPUArray) -> GPUArray:
    """Row ``row[0]`` (int32 on the device) of ``x`` ``[1, S, D]`` as ``[1, 1, D]``."""
    return ops.embedding(row.reshape(1, 1), x.reshape(x.shape[1], x.shape[2]))


class _UncachedAttend:
    """Prefill attention (see :meth:`LlamaModel.attend_uncached`).

    Called with the rotated ``q [B, S, Hq, D]``, ``k``/``v`` ``[B, S, Hkv, D]`` it transposes
    them to heads first. :meth:`from_projection` instead takes the fused q/k/v projection
    ``[B, S, (Hq + 2 Hkv) * D]``: one kernel (:func:`pygpukit.ops.rope_kv_append`) splits it,
    rotates q and k and writes k and v heads-first into their destination (the cache, or a
    scratch pair), and attention reads q through a transposed view and the keys and values from
    there, with no copy between the projection and attention (seven per layer otherwise:
    three splits, three transposes and the cache write). Attention writes its output
    token-major, as the output projection reads it (one transpose more saved).
    """

    def __init__(
        self,
        model: LlamaModel,
        store: Callable[[int, GPUArray, GPUArray], None] | None,
        cache: tuple[list[GPUArray], list[GPUArray]] | None,
        slots: GPUArray | None = None,
    ) -> None:
        self.model, self.store, self.cache = model, store, cache
        self._slots: GPUArray | None = slots
        self._rope: tuple[tuple[Any, ...], Callable[..., None]] | None = None

    def __call__(self, i: int, q: GPUArray, k: GPUArray, v: GPUArray) -> GPUArray:
        # q may hold the last positions only (``last_position_only``): k and v hold them all.
        b, sq, s = q.shape[0], q.shape[1], k.shape[1]
        qt, kt, vt = (t.transpose(0, 2, 1, 3).contiguous() for t in (q, k, v))
        if self.cache is not None:
            ops.kv_cache_append(
                kt, vt, self.cache[0][i], self.cache[1][i], self._prompt_slots(b, s)
            )
        elif self.store is not None:
            self.store(i, kt, vt)
        o = self.model.attention.prefill(qt, kt, vt)
        return o.transpose(0, 2, 1, 3).contiguous().reshape(b, sq, self.model.config.q_size)

    def _prompt_slots(self, b: int, s: int) -> GPUArray:
        """int32 ``[B, S]``: slot ``t`` for token ``t`` of each sequence (made once per shape)."""
        if self._slots is None or tuple(self._slots.shape) != (b, s):
            self._slots = gp.from_numpy(np.tile(np.arange(s, dtype=np.int32), (b, 1)))
        return self._slots

    def from_projection(
        self, i: int, qkv: GPUArray, positions: GPUArray, *, last_query_only: bool = False
    ) -> GPUArray:
        """Attention output ``[B, S, Hq * D]`` of layer ``i`` from its q/k/v projection.

        ``last_query_only``: ``[B, 1, Hq * D]``, the last position's (every key and value is
        still rotated and stored; attention is causal, bottom-right aligned, so that query sees
        them all).
        """
        cfg, model = self.model.config, self.model
        b, s = qkv.shape[0], qkv.shape[1]
        if self.cache is not None:
            k_dst, v_dst = self.cache[0][i], self.cache[1][i]
        else:
            shape = (b, cfg.num_kv_heads, s, cfg.head_dim)
            k_dst, v_dst = gp.empty(shape, qkv.dtype), gp.empty(shape, qkv.dtype)
        rot = model.rotary
        slots = self._prompt_slots(b, s)
        # Every layer makes the same call on arrays the model made: checked at the first layer
        # (rope_kv_append_plan), launched as planned at the others (host time a layer saved).
        key = (tuple(qkv.shape), qkv.dtype, tuple(k_dst.shape), k_dst.dtype, id(positions))
        if self._rope is None or self._rope[0] != key:
            plan = rope_kv_append_plan(
                qkv, rot.cos, rot.sin, positions, k_dst, v_dst, slots, q_heads=cfg.num_heads
            )
            self._rope = (key, plan)
        q = gp.empty((b, s, cfg.num_heads, cfg.head_dim), qkv.dtype)
        self._rope[1](qkv, q, k_dst, v_dst, rot.cos, rot.sin, positions, slots)
        k, v = k_dst[:, :, :s], v_dst[:, :, :s]
        if self.cache is None and self.store is not None:
            self.store(i, k, v)
        if last_query_only:
            q = q[:, -1:]
        sq = q.shape[1]
        # Attention writes [B, S, Hq, D] through a transposed view: the output projection's
        # input as it is, no transpose copy between.
        o = gp.empty((b, sq, cfg.num_heads, cfg.head_dim), qkv.dtype)
        model.attention.prefill(q.transpose(0, 2, 1, 3), k, v, out=o.transpose(0, 2, 1, 3))
        return o.reshape(b, sq, cfg.q_size)
