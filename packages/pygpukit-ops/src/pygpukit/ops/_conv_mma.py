"""Tensor-core launch plans of :func:`~pygpukit.ops.conv1d` / ``conv_transpose1d``.

``kernels/conv_mma.cu`` runs both as an implicit GEMM on mma.sync: the weights and a window of
the input are staged in shared memory per chunk of input channels, with no im2col or column
buffer in global memory, the bias in the epilogue and one launch per call; float16/bfloat16 on
mma.sync m16n8k16; float32, only where the ``conv_kernel`` knob pins a tile, split into TF32
halves (3xTF32: about 1e-5 relative error). This module sizes
the launch (tile, window, shared memory, grid) from a :class:`~pygpukit.ops.conv.Conv1dShape`
and says when the kernels do not apply (then :mod:`.conv` keeps its matmul path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp

from . import _common as c
from . import _kernel_loader as kl
from ._plan import Launch

__all__ = ["TILES", "MmaConvPlan", "plan_conv", "plan_transpose", "transpose_tiles"]

#: Conv tiles (output channels x positions per CTA) by ``conv_kernel`` name.
TILES: dict[str, tuple[int, int]] = {
    "mma_64x64": (64, 64),
    "mma_64x128": (64, 128),
    "mma_128x64": (128, 64),
}

_FILE = "conv_mma"
#: float16/bfloat16 on mma.sync m16n8k16; float32 as 3xTF32 (only where a tile is pinned:
#: about 1e-5 relative error over long reductions, and no faster than the matmul path).
_DTYPES = (np.dtype(np.float16), np.dtype(gp.bfloat16), np.dtype(np.float32))


def _const(name: str) -> int:
    return kl.constant(_FILE, name)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _window_pitch(win: int, itemsize: int) -> int:
    """A window row pitch (elements) that is 16-byte aligned and not a multiple of 16 banks.

    The B gather reads 4 rows (channels) x 8 positions per instruction; rows a multiple of 64
    bytes apart would land on the same banks.
    """
    pitch = _round_up(win, 8)
    if (pitch * itemsize // 4) % 16 == 0:
        pitch += 8
    return pitch


def _smem_limit(device: int) -> int:
    limit = gp.get_device_info(device).get("shared_mem_per_block_optin")
    return int(limit) if limit else 48 * 1024


@dataclass(frozen=True, slots=True)
class MmaConvPlan:
    """One tensor-core launch: ``plan(x, weight, bias, y)`` enqueues it.

    ``dims`` are the kernel's trailing int parameters (``Dims`` in ``conv_mma.cu``).
    """

    launch: Launch
    dims: tuple[int, ...]

    def __call__(self, x: Any, weight: Any, bias: Any, y: Any) -> None:
        self.launch(x, weight, bias if bias is not None else 0, y, *self.dims)


def _launch(name: str, grid: tuple[int, int, int], smem: int, device: int) -> Launch:
    kern = kl.kernel(_FILE, name)
    if smem > 48 * 1024:
        # The device's ceiling, not this plan's size: plans of other shapes share the kernel,
        # and a later, smaller setting would make their launches invalid.
        kern.set_max_dynamic_shared_memory(_smem_limit(device))
    return Launch(kern, grid, _const("CONV_MMA_THREADS"), smem)


#: Under ``auto``, the largest estimated cost (channel chunks a CTA steps through, times the
#: waves of CTAs the GPU runs) at which the implicit GEMM is chosen over the im2col + matmul
#: path. Measured on an H200: a chunk step costs about 7 us (conv) or 20 us (transposed) per
#: wave, the matmul path about 110-120 us a call at the Kokoro / Whisper shapes.
AUTO_MAX_CONV_COST = 16
AUTO_MAX_TRANSPOSE_COST = 8


def _waves(ctas: int, smem: int, device: int) -> int:
    """Waves of ``ctas`` CTAs: up to 3 resident per SM (registers), fewer when ``smem`` says."""
    info = gp.get_device_info(device)
    per_sm_smem = int(info.get("shared_mem_per_sm") or 228 * 1024)
    per_sm = max(1, min(3, per_sm_smem // max(smem, 1)))
    return -(-ctas // (per_sm * int(info.get("sm_count") or 1)))


#: Channel chunks (input channels per pipeline stage) the planner picks from, largest first:
#: more channels a stage means more tensor-core work per barrier, fewer means less padding when
#: the channel count is not a multiple of the chunk.
CONV_CHUNKS = (32, 16)
TRANSPOSE_CHUNKS = (64, 32, 16)


#: Shared memory a CTA may take and still leave room for a second one on an SM 9.0 SM.
_SMEM_TWO_CTAS = 100 * 1024


def _pick_chunk(channels: int, choices: tuple[int, ...]) -> int:
    """The chunk of ``choices`` that pads ``channels`` least (the largest of equals)."""
    return min(choices, key=lambda ch: (_round_up(max(channels, 1), ch), -ch))


def _pick_tile(s: Any, choice: str) -> tuple[int, int]:
    """The conv tile: the configured one, else by stride (measured on an H200).

    128 positions a CTA for stride 1, 64 for longer strides (whose windows grow with them).
    """
    if choice in TILES:
        return TILES[choice]
    return TILES["mma_64x128"] if s.stride == 1 else TILES["mma_64x64"]


def plan_conv(s: Any, dtype: np.dtype[Any], device: int, choice: str) -> MmaConvPlan | None:
    """The tensor-core plan of ``conv1d`` at shape ``s``, or None where the matmul path runs.

    ``choice`` is the ``conv_kernel`` knob: a tile name pins the tile (float32 included);
    ``auto`` takes the implicit GEMM for float16/bfloat16 where its estimated cost is at most
    :data:`AUTO_MAX_CONV_COST`.
    """
    pinned = choice in TILES
    if dtype not in _DTYPES or s.groups == s.c_in or (dtype == np.float32 and not pinned):
        return None
    bm, bn = _pick_tile(s, choice)
    c_group, o_group = s.c_in // s.groups, s.c_out // s.groups
    size = dtype.itemsize
    win = (bn - 1) * s.stride + (s.kernel - 1) * s.dilation + 1
    pitch = _window_pitch(win, size)
    # A weight row is padded by 16 bytes: ldmatrix rows (16-bit) and 32-bit fragment loads
    # (float32) then fall on distinct banks.
    limit = _smem_limit(device)
    options = []
    for chunk in CONV_CHUNKS:
        wpitch = chunk * s.kernel + 16 // size
        smem = 2 * (bm * wpitch + chunk * pitch) * size + chunk * s.kernel * 4
        if smem <= limit:
            options.append((chunk, wpitch, smem))
    if not options:
        return None
    # The chunk that pads the channels least, unless its stages keep fewer than two CTAs on an
    # SM where a smaller chunk would not.
    best = _pick_chunk(c_group, tuple(o[0] for o in options))
    chunk, wpitch, smem = next(o for o in options if o[0] == best)
    if smem > _SMEM_TWO_CTAS:
        chunk, wpitch, smem = min(options, key=lambda o: o[2])
    grid = (-(-s.out_length // bn), -(-o_group // bm), s.batch * s.groups)
    if grid[1] > 65535 or grid[2] > 65535:
        return None
    cost = -(-c_group // chunk) * _waves(grid[0] * grid[1] * grid[2], smem, device)
    if not pinned and cost > AUTO_MAX_CONV_COST:
        return None
    dims = (
        c_group, o_group, s.groups, s.length, s.out_length, s.kernel, s.stride, s.pad_left,
        s.dilation, pitch, win, wpitch, bm, 0, 0, chunk,
    )  # fmt: skip
    name = f"conv_mma_{bm}x{bn}_{c.kernel_suffix(dtype)}"
    return MmaConvPlan(_launch(name, grid, smem, device), dims)


@dataclass(frozen=True, slots=True)
class TransposeTiles:
    """How the transposed convolution's input positions are cut into overlapping tiles.

    A CTA multiplies the weights by ``cols`` input positions ``[i*step, i*step + cols)``; an
    output ``t`` reads inputs ``l`` with ``l*stride = t + padding - k*dilation``, at most
    ``halo = ceil((K-1)*dilation / stride)`` positions below the highest one ``h(t)`` (clipped to
    the input). Tile ``i >= 1`` owns the outputs with ``h(t) >= i*step + halo``, up to the next
    tile's first, so every output is written once, from one tile that holds all its inputs.
    """

    cols: int
    halo: int
    step: int
    count: int

    def first_output(
        self, tile: int, length: int, out_length: int, stride: int, padding: int
    ) -> int:
        """The first output position tile ``tile`` writes (``out_length`` past the last tile).

        The kernel computes the same bounds (``first_output`` in ``conv_transpose_mma``).
        """
        if tile == 0:
            return 0
        lowest = tile * self.step + self.halo
        if lowest > length - 1:
            return out_length
        return min(out_length, max(0, lowest * stride - padding))


def transpose_tiles(
    length: int, kernel: int, stride: int, dilation: int, cols: int
) -> TransposeTiles | None:
    """The tiling of an input of ``length`` positions (None when the halo fills the tile)."""
    halo = -(-(kernel - 1) * dilation // stride)
    step = cols - halo
    if step < 1:
        return None
    count = 1 + max(0, (length - 1 - halo) // step)
    return TransposeTiles(cols, halo, step, count)


def plan_transpose(
    s: Any, dtype: np.dtype[Any], device: int, choice: str = "auto"
) -> MmaConvPlan | None:
    """The tensor-core plan of ``conv_transpose1d`` at ``s``, or None where the matmul path runs.

    As :func:`plan_conv`: a pinned ``conv_kernel`` tile forces it (float32 included), ``auto``
    takes it for float16/bfloat16 up to :data:`AUTO_MAX_TRANSPOSE_COST`.
    """
    pinned = choice in TILES
    if dtype not in _DTYPES or s.groups == s.c_in or (dtype == np.float32 and not pinned):
        return None
    size = dtype.itemsize
    rows_max, cols = _const("CONV_MMA_TRANS_ROWS"), _const("CONV_MMA_TRANS_COLS")
    outs = rows_max // s.kernel
    tiles = transpose_tiles(s.length, s.kernel, s.stride, s.dilation, cols)
    if outs < 1 or tiles is None:
        return None
    c_group, o_group = s.c_in // s.groups, s.c_out // s.groups
    chunk = _pick_chunk(c_group, TRANSPOSE_CHUNKS)
    outs = min(outs, o_group)
    pitch = _window_pitch(cols, size)
    wpitch = rows_max + 8  # 176 bytes (16-bit) or 352 (float32): conflict-free fragment reads
    stage = chunk * wpitch + chunk * pitch
    smem = max(2 * stage * size + chunk * 4, rows_max * (cols + 4) * 4)
    if smem > _smem_limit(device):
        return None
    grid = (tiles.count, -(-o_group // outs), s.batch * s.groups)
    if grid[1] > 65535 or grid[2] > 65535:
        return None
    cost = -(-c_group // chunk) * _waves(grid[0] * grid[1] * grid[2], smem, device)
    if not pinned and cost > AUTO_MAX_TRANSPOSE_COST:
        return None
    dims = (
        c_group, o_group, s.groups, s.length, s.out_length, s.kernel, s.stride, s.pad_left,
        s.dilation, pitch, cols, wpitch, outs * s.kernel, outs, tiles.halo, chunk,
    )  # fmt: skip
    name = f"conv_transpose_mma_{c.kernel_suffix(dtype)}"
    return MmaConvPlan(_launch(name, grid, smem, device), dims)
