"""Launch plans of the tap-major implicit GEMM (``kernels/conv_igemm.cu``) for both convolutions.

One plan is two launches: the weight, rearranged tap-major and channel-padded into a scratch
buffer of its own size (``conv_igemm_weights``; kept in the caller's ``weight_cache`` when it
passes one, so later calls skip it), then the GEMM over 128 output rows x 64 or 128
positions a CTA, with the input window staged position-major in shared memory so that every
operand fragment is one ``ldmatrix`` whatever the stride, dilation or padding, and the bias in
the epilogue. The transposed convolution of stride ``s`` (dilation 1) is the same GEMM over
``C_out * s`` rows (``s`` interleaved ordinary convolutions of ``ceil(K / s)`` taps) whose
epilogue interleaves the phases into the output. float16/bfloat16 only; :func:`plan` says None
where the kernel does not apply (float32, depthwise, a transposed dilation, a window too big for
shared memory) and :mod:`.conv` takes another path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp

from . import _common as c
from . import _kernel_loader as kl
from ._plan import Launch

__all__ = ["IgemmGeometry", "IgemmPlan", "geometry", "plan"]

_FILE = "conv_igemm"
_DTYPES = (np.dtype(np.float16), np.dtype(gp.bfloat16))
#: Channels per pipeline stage, largest first (a stage is one tap x this many channels).
CHUNKS = (64, 32, 16)
#: Positions per CTA.
TILES_N = (128, 64)
#: Shared memory a CTA may take and still let two share an SM 9.0 SM (227 KiB each).
_SMEM_TWO_CTAS = 113 * 1024
_MAX_BLOCKS = 65535


def _const(name: str) -> int:
    return kl.constant(_FILE, name)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True, slots=True)
class IgemmGeometry:
    """The GEMM a convolution becomes (``Geo`` in ``conv_igemm.cu``), before the tile choice.

    ``up`` is 0 for :func:`~pygpukit.ops.conv1d` and the stride for the transposed convolution,
    whose GEMM rows are ``o * up + phase`` and whose window runs at stride 1 over ``taps =
    ceil(K / up)`` taps with ``taps - 1`` positions of left padding.
    """

    cg: int
    cpad: int
    rows: int
    groups: int
    length: int
    cols: int
    taps: int
    stride: int
    pad: int
    dil: int
    chunk: int
    og: int
    out_length: int
    up: int
    up_pad: int
    kernel: int

    def window(self, bn: int) -> int:
        """Input positions a CTA of ``bn`` columns stages per channel."""
        return (bn - 1) * self.stride + (self.taps - 1) * self.dil + 1

    def mrows(self, bm: int) -> int:
        """GEMM rows of one CTA: ``bm``, or the whole output channels (all phases) that fit."""
        return bm if self.up == 0 else (bm // self.up) * self.up


def geometry(s: Any, transposed: bool, chunk: int) -> IgemmGeometry | None:
    """The GEMM of shape ``s`` (a ``Conv1dShape``) at stage width ``chunk``, or None."""
    cg, og = s.c_in // s.groups, s.c_out // s.groups
    cpad = _round_up(cg, chunk)
    if transposed:
        if s.dilation != 1:
            return None
        up = s.stride
        taps = -(-s.kernel // up)
        cols = (s.out_length - 1 + s.pad_left) // up + 1
        return IgemmGeometry(
            cg, cpad, og * up, s.groups, s.length, cols, taps, 1, taps - 1, 1, chunk, og,
            s.out_length, up, s.pad_left, s.kernel,
        )  # fmt: skip
    return IgemmGeometry(
        cg, cpad, og, s.groups, s.length, s.out_length, s.kernel, s.stride, s.pad_left,
        s.dilation, chunk, og, s.out_length, 0, 0, s.kernel,
    )  # fmt: skip


def _smem(g: IgemmGeometry, bn: int, bm: int, stages: int, pad: int, size: int) -> int:
    pitch = g.chunk + pad
    main = (stages * bm * pitch + 2 * g.window(bn) * pitch) * size
    return max(main, bm * (bn + pad) * size)


def _device(device: int) -> tuple[int, int]:
    info = gp.get_device_info(device)
    limit = int(info.get("shared_mem_per_block_optin") or 48 * 1024)
    return limit, int(info.get("sm_count") or 1)


@dataclass(frozen=True, slots=True)
class IgemmPlan:
    """The weight rearrangement and the GEMM: ``plan(x, weight, bias, y)`` enqueues both."""

    prepare: Launch
    prepare_dims: tuple[int, ...]
    scratch: int  # elements of the rearranged weight
    main: Launch
    dims: tuple[int, ...]

    def __call__(
        self, x: Any, weight: Any, bias: Any, y: Any, weight_cache: dict[Any, Any] | None = None
    ) -> None:
        wp = self.rearranged(weight, weight_cache)
        self.main(x, wp, bias if bias is not None else 0, y, *self.dims)

    def rearranged(self, weight: Any, cache: dict[Any, Any] | None = None) -> Any:
        """The tap-major weight copy, from ``cache`` when it holds this layout, else made now.

        ``cache``: one weight's dict (``weight_cache`` of :func:`.conv.conv1d`), which keeps a
        copy made here.
        """
        key = (self.prepare_dims, weight.dtype, weight.shape)
        wp = cache.get(key) if cache is not None else None
        if wp is None:
            wp = gp.empty((self.scratch,), weight.dtype)
            self.prepare(weight, wp, *self.prepare_dims)
            if cache is not None:
                cache[key] = wp
        return wp


def _tile_cost(cols: int, bn: int, others: int, sms: int) -> int:
    """Columns the busiest SM computes with ``bn``-wide tiles (two CTAs an SM at a time).

    The planner takes the tile of least cost, the wider of equals (it reads the weights fewer
    times): a short signal gets the narrow tile when that fills SMs the wide one leaves idle.
    """
    ctas = -(-cols // bn) * others
    return -(-ctas // (2 * sms)) * bn


#: A wider stage may pad the channels by up to this fraction: more tensor-core work per barrier
#: is worth a little zero padding (1090 channels take 64-wide stages, 1152 with the padding).
_PAD_ALLOWANCE = 0.125


def _pick_chunk(cg: int) -> tuple[int, ...]:
    """Stage widths to try, best first.

    The widest that pads ``cg`` by at most :data:`_PAD_ALLOWANCE`, else the one that pads
    least (the widest of equals); the rest follow, for shapes whose window does not fit.
    """
    cg = max(cg, 1)
    wide = [ch for ch in CHUNKS if _round_up(cg, ch) <= cg * (1 + _PAD_ALLOWANCE)]
    first = wide[0] if wide else min(CHUNKS, key=lambda ch: (_round_up(cg, ch), -ch))
    return (first, *(ch for ch in CHUNKS if ch != first))


def plan(s: Any, dtype: np.dtype[Any], device: int, transposed: bool) -> IgemmPlan | None:
    """The implicit-GEMM plan of a convolution of shape ``s``, or None where it does not apply."""
    if dtype not in _DTYPES or s.groups == s.c_in:
        return None
    bm, stages, pad = _const("CONV_IGEMM_BM"), _const("CONV_IGEMM_STAGES"), _const("CONV_IGEMM_PAD")
    if transposed and s.stride > bm:
        return None
    limit, sms = _device(device)
    size = dtype.itemsize
    chosen = None
    for chunk in _pick_chunk(s.c_in // s.groups):
        g = geometry(s, transposed, chunk)
        if g is None:
            return None
        mrows = g.mrows(bm)
        m_tiles = -(-g.rows // mrows)
        budget = min(_SMEM_TWO_CTAS, limit)
        fits = [bn for bn in TILES_N if _smem(g, bn, bm, stages, pad, size) <= budget]
        if not fits:
            continue
        cols, others = g.cols, m_tiles * s.batch * s.groups
        bn = min(fits, key=lambda n: (_tile_cost(cols, n, others, sms), -n))
        chosen = (g, bn, mrows, m_tiles)
        break
    if chosen is None:
        return None
    g, bn, mrows, m_tiles = chosen
    grid = (-(-g.cols // bn), m_tiles, s.batch * s.groups)
    if grid[1] > _MAX_BLOCKS or grid[2] > _MAX_BLOCKS:
        return None
    c.check_int32("conv1d", columns=g.cols, rows=g.rows, window=g.window(bn) * g.cpad)
    smem = _smem(g, bn, bm, stages, pad, size)
    suffix = c.kernel_suffix(dtype)
    kern = kl.kernel(_FILE, f"conv_igemm_{bn}_{suffix}")
    if smem > 48 * 1024:
        kern.set_max_dynamic_shared_memory(limit)
    main = Launch(kern, grid, _const("CONV_IGEMM_THREADS"), smem)
    dims = (
        g.cg, g.cpad, g.rows, g.groups, g.length, g.cols, g.taps, g.stride, g.pad, g.dil,
        g.chunk, g.window(bn), mrows, g.og, g.out_length, g.up, g.up_pad,
    )  # fmt: skip
    scratch = g.groups * g.rows * g.taps * g.cpad
    block = _const("CONV_IGEMM_BLOCK")
    prepare = Launch(
        kl.kernel(_FILE, f"conv_igemm_weights_{suffix}"),
        max(1, min(_MAX_BLOCKS, -(-scratch // block))),
        block,
    )
    prepare_dims = (scratch, g.cg, g.cpad, g.og, g.rows, g.taps, g.kernel, g.up)
    return IgemmPlan(prepare, prepare_dims, scratch, main, dims)
