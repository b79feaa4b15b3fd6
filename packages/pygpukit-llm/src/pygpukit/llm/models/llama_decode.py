"""One decode step of a single sequence in few kernels: four fused GEMVs and the attention a layer.

A batch-1 decode step of a small model is bound by how many kernels it launches, not by its
weight bytes (docs/llm-performance.md). :class:`FusedDecodeStep` runs a
:class:`~pygpukit.llm.models.llama.LlamaModel` layer as

1. RMSNorm -> q/k/v GEMV (+ bias) -> RoPE, k and v into the cache (``ops.decode_linear``,
   epilogue ``rope_kv``);
2. decode attention over the cache (``Attention.decode``: split over CTAs, then a combine kernel;
   or, with ``single_pass``, ``ops.decode_attention_single``: one launch, for short caches);
3. o_proj GEMV -> + residual (epilogue ``residual``: the residual stream updated in place);
4. RMSNorm -> gate/up GEMV -> ``silu(gate) * up`` (epilogue ``swiglu``);
5. down GEMV -> + residual;

and the step as the layers (the first q/k/v GEMV also gathers the token's embedding row, which
starts the residual stream), then RMSNorm -> head GEMV in one more launch: float32 logits
(``step()``), or, for a greedy step, the argmax and the state's advance in the same launch
(``greedy()``, ``ops.decode_argmax``). The values are those of the unfused step
(``LlamaModel.hidden_states``): each fused stage rounds where the unfused kernels store. Every
intermediate is preallocated, so the step allocates nothing and is captured once in a CUDA
graph.

Models with per-head q/k RMSNorm (Qwen3) or a partly rotated head keep the unfused step: the
norm sits between the projection and RoPE (:func:`supports`).
"""

from __future__ import annotations

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.ops import (
    BoundDecodeArgmax,
    BoundDecodeLinear,
    RopeKV,
    SequenceState,
    bind_decode_argmax,
    bind_decode_linear,
)
from pygpukit.ops.decode_attention_single import SINGLE_PASS_HEAD_DIMS
from pygpukit.ops.decode_attention_single import plan as single_pass_plan

from ..kv_cache import StaticKVCache
from .llama import LlamaModel

__all__ = ["SINGLE_PASS_MAX_TOKENS", "FusedDecodeStep", "supports"]

#: Cache capacity up to which the step runs the one-launch attention. On an H200 it took
#: SmolLM2-135M from 1737 to 1998 tok/s and Qwen2.5-0.5B from 1283 to 1425 at 400 tokens.
SINGLE_PASS_MAX_TOKENS = 1024
#: Gather the token's embedding row in the first q/k/v GEMV (no embedding kernel). Read when a
#: step is built.
FOLD_EMBEDDING = True


def supports(model: LlamaModel) -> bool:
    """Whether :class:`FusedDecodeStep` runs this model (else the unfused step does).

    float16/bfloat16 weights whose every GEMV the fused kernel takes (sizes multiples of 8, an
    even half head and intermediate size, a hidden row that fits shared memory), SwiGLU, RoPE
    over the whole head, and no per-head q/k norm (it sits between the projection and RoPE).
    """
    cfg = model.config
    rotary = model.rotary
    sizes = (cfg.hidden_size, cfg.q_size, cfg.intermediate_size)
    return (
        model.dtype in (np.dtype(gp.float16), np.dtype(gp.bfloat16))
        and all(n % 8 == 0 for n in sizes)
        and cfg.head_dim % 4 == 0
        and cfg.hidden_size * model.dtype.itemsize <= 48 * 1024
        and not cfg.qk_norm
        and rotary.rotary_dim == cfg.head_dim
        and rotary.layout == "neox"
        and model.layers[0].mlp.activation == "silu"
    )


class FusedDecodeStep:
    """The logits of one token of one sequence over a :class:`StaticKVCache`, fused.

    ``token``, ``position`` and ``lens`` are the int32 ``[1]`` device arrays of the current
    token, its position (its cache slot is ``position % capacity``) and the number of cached
    tokens it attends to (itself included); ``step()`` reads them, writes the token's k and v into
    the cache and returns the float32 logits ``[1, vocab]`` (always the same array). Given
    ``next_token`` (int32 ``[1]``) and ``history`` (int32 ``[max_len]``), :meth:`greedy` runs the
    step with the greedy token chosen in the head's launch and the state advanced there
    (``ops.decode_advance``'s bookkeeping). Every call is bound (validated and planned) at
    construction, so a step makes no checks or plans.
    """

    def __init__(
        self,
        model: LlamaModel,
        cache: StaticKVCache,
        token: GPUArray,
        position: GPUArray,
        lens: GPUArray,
        next_token: GPUArray | None = None,
        history: GPUArray | None = None,
    ) -> None:
        if not supports(model):
            raise ValueError(
                "this model needs the unfused decode step (float32, q/k norm, partial RoPE or "
                "sizes the fused kernel does not take)"
            )
        cfg = model.config
        self.model, self.cache = model, cache
        self.token, self.lens = token.reshape(1), lens
        dtype = model.dtype
        hq, d = cfg.num_heads, cfg.head_dim
        self.residual = gp.zeros((1, cfg.hidden_size), dtype)
        self.q = gp.zeros((1, hq, d), dtype)
        self.attn = gp.zeros((1, hq, d), dtype)
        self.act = gp.zeros((1, cfg.intermediate_size), dtype)
        self.logits = gp.zeros((1, cfg.vocab_size), gp.float32)
        resid, rotary = self.residual, model.rotary
        q_rows, attn_rows = self.q.reshape(1, hq * d), self.attn.reshape(1, hq * d)
        table = model.embed.table
        #: Whether the first q/k/v GEMV gathers the embedding row (else an embedding kernel runs).
        self.folds_embedding = FOLD_EMBEDDING and table.data_ptr % 16 == 0
        self._layers: list[tuple[BoundDecodeLinear, ...]] = []
        for i, layer in enumerate(model.layers):
            k_cache, v_cache = cache.k[i], cache.v[i]
            rope = RopeKV(rotary.cos, rotary.sin, position, k_cache, v_cache, hq)
            gather = {}
            if i == 0 and self.folds_embedding:
                gather = {"gather_ids": self.token, "gather_out": resid}
            self._layers.append((
                bind_decode_linear(
                    table if gather else resid, layer.qkv.weight, layer.qkv.bias,
                    norm_weight=layer.input_norm.weight, eps=layer.input_norm.eps,
                    epilogue="rope_kv", rope_kv=rope, out=q_rows, **gather,
                ),
                bind_decode_linear(attn_rows, layer.o_proj.weight, layer.o_proj.bias,
                                   epilogue="residual", residual=resid),
                bind_decode_linear(
                    resid, layer.mlp.gate_up.weight, norm_weight=layer.post_norm.weight,
                    eps=layer.post_norm.eps, epilogue="swiglu", out=self.act,
                ),
                bind_decode_linear(self.act, layer.mlp.down.weight, epilogue="residual",
                                   residual=resid),
            ))  # fmt: skip
        self._head = bind_decode_linear(
            resid, model.lm_head.weight, norm_weight=model.norm.weight, eps=model.norm.eps,
            out_dtype=gp.float32, out=self.logits,
        )  # fmt: skip
        self._greedy_head: BoundDecodeArgmax | None = None
        if next_token is not None and history is not None:
            state = SequenceState(self.token, position, lens, history, cache.capacity)
            self._greedy_head = bind_decode_argmax(
                resid, model.lm_head.weight, out=next_token.reshape(1),
                norm_weight=model.norm.weight, eps=model.norm.eps, advance=state,
            )  # fmt: skip
        # Attention: the split kernel + combine, or one launch over a short cache.
        self._single = None
        if cfg.head_dim in SINGLE_PASS_HEAD_DIMS:
            self._single = single_pass_plan(self.q, cache.k[0])
        #: Run the attention with ``ops.decode_attention_single`` (where the head dim allows):
        #: by default when the cache holds at most SINGLE_PASS_MAX_TOKENS (one CTA per query
        #: head walks every cached key, so it loses to the split kernel on long caches).
        self.single_pass = self._single is not None and cache.capacity <= SINGLE_PASS_MAX_TOKENS
        calls: list[BoundDecodeLinear | BoundDecodeArgmax] = [
            call for layer in self._layers for call in layer
        ]
        calls += [self._head] if self._greedy_head is None else [self._head, self._greedy_head]
        if gp.backend_name() == "cuda" and not all(call.fused for call in calls):
            # The unfused fallback allocates its intermediates: not in a captured graph.
            raise AssertionError("supports() admitted a model the fused kernel does not take")

    def __call__(self) -> GPUArray:
        """Enqueue the step (see the class docstring); returns the logits array."""
        self._layers_step()
        return self._head()

    @property
    def has_greedy(self) -> bool:
        """Whether :meth:`greedy` is available (``next_token`` and ``history`` were given)."""
        return self._greedy_head is not None

    def greedy(self) -> None:
        """Enqueue a greedy step: the token into ``next_token``, then the state advanced.

        The same as ``ops.argmax(step(), out=next_token)`` and ``ops.decode_advance``, without
        the float32 logits or the two kernels.
        """
        if self._greedy_head is None:
            raise RuntimeError("greedy() needs the step built with next_token= and history=")
        self._layers_step()
        self._greedy_head()

    def _layers_step(self) -> None:
        m = self.model
        if not self.folds_embedding:
            m.embed(self.token, out=self.residual)
        single = self._single if self.single_pass else None  # None: no kernel for this D
        scale = m.attention.scale
        for i, (qkv, o_proj, gate_up, down) in enumerate(self._layers):
            qkv()
            k, v = self.cache.k[i], self.cache.v[i]
            if single is not None:
                single(self.q, k, v, self.lens, self.attn, scale)
            else:
                m.attention.decode(self.q, k, v, self.lens, out=self.attn)
            o_proj()
            gate_up()
            down()
