"""The head of a greedy decode step in one launch: :func:`decode_argmax`.

A greedy batch-1 step ends with RMSNorm -> head GEMV -> argmax -> bookkeeping. Unfused that is
the head GEMV writing float32 logits (600 KB for a 151,936-token vocabulary), an argmax kernel
reading them back (one block, the slowest kernel of a small model's step after the head), and
``decode_advance``. Here the head GEMV's epilogue does both: each block keeps the best
(logit, row) of its rows, folds it into one device word with an atomic maximum, and the last
block to finish reads the winner, stores the token and advances the sequence's state
(``kernels/decode_linear.cu``, ``decode_head_argmax``). The logits are the head GEMV's float32
sums bit for bit (the same per-row arithmetic as :func:`decode_linear`), so the token is the one
:func:`argmax` picks from them: the largest logit, the lowest index on ties, NaN as -inf. Ask
for ``logits=`` to have them stored as well.

On the CUDA backend with float16/bfloat16, ``K % 8 == 0`` and 16-byte aligned arrays, one kernel
runs; otherwise :func:`decode_linear`, :func:`argmax` and :func:`decode_advance` run in turn, and
on the CPU backend their NumPy references.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from . import config
from ._constants import constant
from ._plan import Launch, PlanCache, per_backend
from .decode_linear import bind_decode_linear
from .decode_state import decode_advance
from .reference import linear as ref_linear
from .reference import normalization as ref_norm
from .reference import sampling as ref_sampling
from .sampling import argmax

__all__ = ["BoundDecodeArgmax", "SequenceState", "bind_decode_argmax", "decode_argmax"]

#: Blocks per SM of the head kernel: its warps walk the rows in a grid-stride loop, so each
#: block normalises the row once and the final reduction sees a few hundred partial maxima.
HEAD_BLOCKS_PER_SM = 8
#: Launch the head with programmatic dependent launch (None: when its weight is at most 24 MiB,
#: the rule of :func:`decode_linear`).
HEAD_DEPENDENT: bool | None = None
_PDL_MAX_BYTES = 24 << 20
_MAX_STAGED_BYTES = 48 * 1024


@dataclass(frozen=True)
class SequenceState:
    """One sequence's decode state, as :func:`decode_advance` takes it (int32 device arrays).

    ``token``, ``position``, ``lens``: ``[1]``; ``history``: ``[max_len]``; ``capacity``: the KV
    cache's slots.
    """

    token: GPUArray
    position: GPUArray
    lens: GPUArray
    history: GPUArray
    capacity: int


class BoundDecodeArgmax:
    """A :func:`decode_argmax` call with its arrays bound: ``bound()`` enqueues it again."""

    __slots__ = ("_args", "_dependent", "_plan", "_run", "_scratch", "fused", "result")

    def __init__(self, result: GPUArray, plan: Launch | None, args: tuple[Any, ...], run: Any,
                 dependent: bool = False, scratch: tuple[GPUArray, ...] = ()) -> None:  # fmt: skip
        self.result = result
        self._plan, self._args, self._run = plan, args, run
        #: Whether the call is the one fused kernel.
        self.fused = plan is not None
        self._dependent = dependent
        self._scratch = scratch  # device words the kernel uses (kept alive with the call)

    def __call__(self) -> GPUArray:
        """Enqueue the call; returns the int32 ``[1]`` token array."""
        plan = self._plan
        if plan is not None:
            plan.kernel.launch(plan.grid, plan.block, self._args, shared_mem=plan.shared_mem,
                               dependent=self._dependent)  # fmt: skip
        else:
            self._run(*self._args)
        return self.result


def _check(
    x: GPUArray,
    weight: GPUArray,
    norm_weight: GPUArray | None,
    out: GPUArray,
    logits: GPUArray | None,
    advance: SequenceState | None,
) -> tuple[int, int]:
    c.check_array(x, "x", dtypes=c.FLOAT_DTYPES)
    if x.size != x.shape[-1]:
        raise ValueError(f"decode_argmax takes one row of x ([K] or [1, K]), got {x.shape}")
    c.check_array(weight, "weight", dtypes=c.FLOAT_DTYPES, ndim=2)
    c.check_same_dtype(x, ("weight", weight), ("norm_weight", norm_weight))
    n, k = weight.shape
    if x.shape[-1] != k:
        raise ValueError(f"x has {x.shape[-1]} features but weight is {tuple(weight.shape)}")
    if n == 0:
        raise ValueError("decode_argmax needs at least one row of weight (a vocabulary)")
    if norm_weight is not None:
        c.check_array(norm_weight, "norm_weight", ndim=1)
        c.check_shape(norm_weight, "norm_weight", (k,))
    c.check_array(out, "out", dtypes=[np.int32])
    if out.size != 1:
        raise ValueError(f"out must hold one int32 token, got shape {out.shape}")
    c.check_writeable(out, "out")
    if logits is not None:
        c.check_array(logits, "logits", dtypes=[np.float32])
        if logits.size != n:
            raise ValueError(f"logits must hold the {n} float32 logits, got {logits.shape}")
        c.check_writeable(logits, "logits")
    if advance is not None:
        for name in ("token", "position", "lens", "history"):
            a = getattr(advance, name)
            c.check_array(a, name, dtypes=[np.int32])
            c.check_writeable(a, name)
        for name in ("token", "position", "lens"):
            if getattr(advance, name).size != 1:
                raise ValueError(f"{name} must hold one int32")
        if advance.capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {advance.capacity!r}")
    return n, k


def bind_decode_argmax(
    x: GPUArray,
    weight: GPUArray,
    *,
    out: GPUArray,
    norm_weight: GPUArray | None = None,
    eps: float = 1e-6,
    logits: GPUArray | None = None,
    advance: SequenceState | None = None,
) -> BoundDecodeArgmax:
    """:func:`decode_argmax`'s call validated and planned once: ``bound()`` enqueues it.

    Arguments as :func:`decode_argmax`; the arrays are read at each call (they must stay alive).
    """
    n, k = _check(x, weight, norm_weight, out, logits, advance)
    args = (x, weight, norm_weight, float(eps), out, logits, advance)
    return _bind_backend(n, k, args)


def decode_argmax(
    x: GPUArray,
    weight: GPUArray,
    *,
    out: GPUArray,
    norm_weight: GPUArray | None = None,
    eps: float = 1e-6,
    logits: GPUArray | None = None,
    advance: SequenceState | None = None,
) -> GPUArray:
    """The greedy token of one row: ``argmax(rmsnorm(x) @ weight.T)`` into ``out``, one launch.

    ``x``: ``[K]`` or ``[1, K]``; ``weight`` ``[N, K]`` (the head), ``norm_weight`` ``[K]`` (the
    final RMSNorm, ``eps``; None: no norm), one float dtype. ``out``: int32 ``[1]``, the token
    (the largest float32 logit, the lowest index on ties, NaN as -inf: :func:`argmax` of the
    logits :func:`decode_linear` with ``out_dtype=float32`` computes). ``logits`` (float32,
    ``N`` elements): where to store the logits too. ``advance``: after the token, advance that
    sequence as :func:`decode_advance` does with it. Returns ``out`` without waiting on the GPU.
    """
    return bind_decode_argmax(
        x, weight, out=out, norm_weight=norm_weight, eps=eps, logits=logits, advance=advance
    )()


def _advance_args(advance: SequenceState | None) -> tuple[Any, ...]:
    if advance is None:
        return (0, 0, 0, 0, 0, 1)
    return (advance.token, advance.position, advance.lens, advance.history,
            advance.history.size, advance.capacity)  # fmt: skip


def _numpy(
    x: GPUArray,
    weight: GPUArray,
    norm_weight: GPUArray | None,
    eps: float,
    out: GPUArray,
    logits: GPUArray | None,
    advance: SequenceState | None,
) -> None:
    row = c.f32(x).reshape(1, -1)
    if norm_weight is not None:
        row = ref_norm.norm(row, c.f32(norm_weight), None, eps, False, x.dtype).astype(np.float32)
    values = ref_linear.linear(row, c.host(weight), None, None).astype(np.float32).reshape(1, -1)
    if logits is not None:
        c.write_into(logits, values.reshape(logits.shape))
    c.write_into(out, ref_sampling.argmax(values).reshape(out.shape))
    if advance is not None:
        decode_advance(out, advance.token, advance.position, advance.lens, advance.history,
                       advance.capacity)  # fmt: skip


def _composed(
    x: GPUArray,
    weight: GPUArray,
    norm_weight: GPUArray | None,
    eps: float,
    out: GPUArray,
    logits: GPUArray | None,
    advance: SequenceState | None,
    head: Any,
) -> None:
    """The unfused head, argmax and bookkeeping: shapes the kernel does not take, on the GPU."""
    argmax(head().reshape(1, -1), out=out.reshape(1))
    if advance is not None:
        decode_advance(out, advance.token, advance.position, advance.lens, advance.history,
                       advance.capacity)  # fmt: skip


def _bind_numpy(n: int, k: int, args: tuple[Any, ...]) -> BoundDecodeArgmax:
    return BoundDecodeArgmax(args[4], None, args, _numpy)


def _plan(n: int, k: int, dtype: np.dtype, norm: bool, device: int) -> tuple[Launch, bool]:
    warps = constant("decode_linear", "DECODE_LINEAR_WARPS")
    rows = constant("decode_linear", "DECODE_HEAD_ROWS_PER_WARP")
    c.check_int32("decode_argmax", N=n, K=k)
    kernel = kl.kernel("decode_linear", f"decode_head_argmax_{c.kernel_suffix(dtype)}")
    sms = int(gp.get_device_info(device)["sm_count"] or 1)
    groups = -(-n // rows)
    grid = max(1, min(-(-groups // warps), sms * HEAD_BLOCKS_PER_SM))
    shared = k * dtype.itemsize if norm else 0
    dependent = HEAD_DEPENDENT
    if dependent is None:
        dependent = n * k * dtype.itemsize <= _PDL_MAX_BYTES
    dependent = dependent and config.get().dependent_launch == "on"
    return Launch(kernel, grid, warps * 32, shared), dependent


#: Head launches by (N, K, dtype, norm prologue, device).
PLANS: PlanCache[tuple[Launch, bool]] = PlanCache("decode_argmax", _plan)


def _bind_cuda(n: int, k: int, args: tuple[Any, ...]) -> BoundDecodeArgmax:
    x, weight, norm_weight, eps, out, logits, advance = args
    fusable = (
        x.dtype in c.HALF_DTYPES
        and k % 8 == 0
        and x.data_ptr % 16 == 0
        and weight.data_ptr % 16 == 0
        and (norm_weight is None or norm_weight.data_ptr % 16 == 0)
        and k * x.dtype.itemsize <= _MAX_STAGED_BYTES
    )
    if not fusable:
        target = logits if logits is not None else gp.empty((n,), gp.float32)
        head = bind_decode_linear(x, weight, norm_weight=norm_weight, eps=eps,
                                  out=target.reshape(-1), out_dtype=gp.float32)  # fmt: skip
        return BoundDecodeArgmax(out, None, (*args, head), _composed)
    launch, dependent = PLANS.get(n, k, x.dtype, norm_weight is not None, gp.get_device())
    best = gp.zeros((1,), gp.int64)  # the running (logit, row) maximum; the kernel re-zeroes it
    done = gp.zeros((1,), gp.int32)  # blocks finished; the last one re-zeroes it
    kernel_args = (
        x, norm_weight if norm_weight is not None else 0, eps, weight, n, k,
        logits if logits is not None else 0, best, done, out, *_advance_args(advance),
    )  # fmt: skip
    return BoundDecodeArgmax(out, launch, kernel_args, None, dependent, (best, done))


_bind_backend = per_backend(cpu=_bind_numpy, cuda=_bind_cuda)
