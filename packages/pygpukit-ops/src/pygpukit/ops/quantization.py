"""pygpukit.ops.quantization: GGUF (ggml) tensor types dequantized on the device.

:func:`dequantize` turns the raw bytes of a ggml tensor (a ``uint8`` GPUArray, as stored in a
``.gguf`` file) into a float32, float16 or bfloat16 array: a cast for ``F32``, ``F16`` and
``BF16``, and the 32-element block formats ``Q8_0``, ``Q4_0`` and ``Q4_1`` (an fp16 scale per
block, plus an fp16 minimum for ``Q4_1``). Other ggml types raise ``ValueError`` naming the type.
On the CPU backend the same call runs a NumPy version.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.dtypes import normalize

from . import _common as c
from . import _kernel_loader as kl
from ._plan import per_backend
from .reference import quantization as reference

__all__ = ["GGML_BLOCKS", "dequantize"]

#: The ggml types :func:`dequantize` reads: name -> (ggml type id, elements per block, bytes
#: per block).
GGML_BLOCKS: dict[str, tuple[int, int, int]] = {
    "F32": (0, 1, 4),
    "F16": (1, 1, 2),
    "BF16": (30, 1, 2),
    "Q8_0": (8, 32, 34),
    "Q4_0": (2, 32, 18),
    "Q4_1": (3, 32, 20),
}
_BY_ID = {v[0]: k for k, v in GGML_BLOCKS.items()}
_MAX_BLOCKS = 65535
_FLOAT_VIEWS = {
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(gp.bfloat16),
}


def _type_name(ggml_type: int | str) -> str:
    if isinstance(ggml_type, str) and ggml_type.upper() in GGML_BLOCKS:
        return ggml_type.upper()
    if isinstance(ggml_type, int) and not isinstance(ggml_type, bool) and ggml_type in _BY_ID:
        return _BY_ID[ggml_type]
    raise ValueError(
        f"dequantize: ggml type {ggml_type!r} is not supported; supported: "
        f"{', '.join(f'{k} ({v[0]})' for k, v in GGML_BLOCKS.items())}"
    )


def _dequantize_numpy(raw: GPUArray, y: GPUArray, name: str, n: int) -> None:
    values = reference.dequantize(
        c.host(raw), name, n, GGML_BLOCKS[name][2], _FLOAT_VIEWS.get(name)
    )
    c.write_into(y, values.reshape(y.shape))


def _dequantize_cuda(raw: GPUArray, y: GPUArray, name: str, n: int) -> None:
    if n == 0:
        return
    align = 4 if name == "F32" else 2
    if raw.data_ptr % align:
        raise ValueError(f"dequantize: raw must be {align}-byte aligned for {name}")
    kernel = kl.kernel("quantization", f"dequantize_{name.lower()}_{c.kernel_suffix(y.dtype)}")
    block_threads = 256
    grid = max(1, min(_MAX_BLOCKS, -(-n // block_threads)))
    kernel.launch(grid, block_threads, (raw, y, n))


_dequantize = per_backend(cpu=_dequantize_numpy, cuda=_dequantize_cuda)


def dequantize(
    raw: GPUArray,
    ggml_type: int | str,
    shape: Any,
    dtype: Any = "float32",
    *,
    out: GPUArray | None = None,
) -> GPUArray:
    """Dequantize the raw bytes of a ggml tensor into a ``shape`` array of ``dtype``.

    ``raw``: contiguous ``uint8``, exactly the tensor's stored bytes (for a block type,
    ``prod(shape) / 32`` blocks). ``ggml_type``: a name (``"Q4_1"``) or a ggml type id (``3``),
    one of ``F32``, ``F16``, ``BF16``, ``Q8_0``, ``Q4_0``, ``Q4_1``. ``shape`` is row-major
    (a GGUF tensor's dims reversed); its last dimension must be a multiple of the block size.
    ``dtype``: float32, float16 or bfloat16. Values are computed in float32 and rounded once.
    """
    name = _type_name(ggml_type)
    raw = c.check_array(raw, "raw", dtypes=(np.dtype(np.uint8),))
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    if any(s < 0 for s in shape):
        raise ValueError(f"dequantize: shape {shape} has a negative dimension")
    dt = normalize(dtype)
    if dt not in c.FLOAT_DTYPES:
        raise ValueError(f"dequantize: dtype must be float32, float16 or bfloat16, got {dtype!r}")
    _, block, block_bytes = GGML_BLOCKS[name]
    n = math.prod(shape)
    if block > 1 and shape and shape[-1] % block:
        raise ValueError(
            f"dequantize: {name} stores blocks of {block} elements along the last axis, but "
            f"shape {shape} ends in {shape[-1]}"
        )
    expected = n // block * block_bytes
    if raw.ndim != 1 or raw.size != expected:
        raise ValueError(
            f"dequantize: {name} of shape {shape} is {expected} contiguous bytes, got raw of "
            f"shape {raw.shape}"
        )
    c.check_out(out, shape, dt)
    y = c.result(out, shape, dt)
    _dequantize(raw, y, name, n)
    return y
