"""Matrix multiplication: ``gp.matmul(a, b)`` and ``a @ b``.

NumPy's ``matmul`` semantics:

- 2-D ``(m, k) @ (k, n) -> (m, n)``; more dimensions are stacks of matrices whose
  leading (batch) dimensions broadcast like NumPy's; a 1-D left operand is a row
  vector and a 1-D right operand a column vector, the added dimension removed from
  the result. 0-d operands and mismatched inner dimensions raise ``ValueError``.
- Transposed views (``a.T``, ``swapaxes``) are read in place, never copied: cuBLASLt
  gets them as transposed operands, the own kernels read them through their strides.
- **Dtypes**: the result has the promoted dtype of the operands (NumPy's rules;
  bfloat16 with float16 gives float32, bfloat16 with an integer stays bfloat16).
  float32 runs in full fp32 on CUDA cores unless the caller opts into TF32 tensor
  cores (``allow_tf32=True``, or ``PYGPUKIT_ALLOW_TF32=1`` when ``allow_tf32`` is
  None); float16 and bfloat16 run on tensor cores with fp32 accumulation; float64
  uses cuBLASLt's DGEMM where loaded, else (and integers and bool always) a simple
  correct kernel, one thread per output (integers wrap as NumPy's do).
- **Backend**: cuBLASLt when it is installed, unless ``PYGPUKIT_GEMM_BACKEND=own``
  (read on every call) selects the runtime's own kernels; ``cublaslt`` requires it
  (``LibraryNotFoundError`` when it is missing). On the CPU backend NumPy computes
  (half types in float64, then rounded).
- ``out`` receives the result (its shape must be the result's; values are cast to
  its dtype; it may alias an operand).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _indexing, env
from .array import GPUArray, _wrap
from .dtypes import NAMES, SUPPORTED, normalize
from .validation import boolean, out_array

__all__ = ["matmul", "matmul_nt", "result_dtype"]

_BF16 = SUPPORTED["bfloat16"]
_F16 = SUPPORTED["float16"]
_F32 = SUPPORTED["float32"]


def result_dtype(a: np.dtype[Any], b: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype of ``a @ b`` for operands of dtypes ``a`` and ``b``."""
    if a == b:
        return a
    if a == _BF16 or b == _BF16:
        other = b if a == _BF16 else a
        if other == _F16:
            return _F32
        if other.kind in "f":  # float32, float64
            return other
        return _BF16  # integers and bool
    return normalize(np.result_type(a, b))


def allow_tf32_default() -> bool:
    """Whether ``PYGPUKIT_ALLOW_TF32`` opts float32 matmul into TF32 (read on each call)."""
    return env.flag("PYGPUKIT_ALLOW_TF32")


def _as_operand(x: Any, name: str) -> GPUArray:
    if not isinstance(x, GPUArray):
        raise TypeError(f"matmul() expects GPUArrays, got {type(x).__name__} for {name}")
    return x


def _batched(x: GPUArray, batch: tuple[int, ...]) -> GPUArray:
    """View ``x`` (..., r, c) broadcast to ``batch`` as a 3-D (B, r, c) array.

    Copies only when the broadcast batch dimensions cannot be folded into one stride.
    """
    impl = x._impl
    shape, strides = tuple(impl.shape), tuple(impl.strides)
    nb = len(batch)
    lead = len(shape) - 2
    # Broadcast strides for the batch dimensions (0 where x has none or size 1).
    bstrides = [0] * nb
    for i in range(lead):
        j = nb - lead + i
        bstrides[j] = strides[i] if shape[i] != 1 else 0
    rows, cols = shape[-2:]
    srow, scol = strides[-2:]
    # Fold the batch dimensions into one: stride[i] == stride[i + 1] * extent[i + 1].
    total = 1
    step = 0
    ok = True
    for extent, stride in zip(reversed(batch), reversed(bstrides), strict=True):
        if extent == 1:
            continue
        if total == 1:
            step = stride
        elif stride != step * total:
            ok = False
            break
        total *= extent
    backend = x._backend
    if ok:
        offset = backend.offset(impl)
        view = backend.view(impl, (total, rows, cols), (step, srow, scol), offset)
        return _wrap(view, backend)
    # Not foldable (e.g. a sliced batch): materialise the broadcast operand once.
    full = x.broadcast_to((*batch, rows, cols)).copy()
    return _batched(full, batch)


def matmul(a: Any, b: Any, out: GPUArray | None = None, allow_tf32: bool | None = None) -> GPUArray:
    """Matrix product of ``a`` and ``b`` with NumPy's ``matmul`` semantics (see the module doc).

    ``allow_tf32=None`` follows ``PYGPUKIT_ALLOW_TF32``; it only changes float32 products.
    """
    # The common case first, checked with a few attribute reads: two 2-D operands, or two 3-D
    # operands of one batch size, of one dtype, no out. One backend call does the rest (views,
    # the allocation, the product), so a small matmul costs what the kernel launch costs.
    if out is None and isinstance(a, GPUArray) and isinstance(b, GPUArray):
        backend = a._backend
        ai, bi = a._impl, b._impl
        sa, sb = ai.shape, bi.shape
        nd = len(sa)
        dtype = ai.dtype
        if (
            backend is b._backend
            and nd == len(sb)
            and (nd == 2 or (nd == 3 and sa[0] == sb[0]))
            and sa[-1] == sb[-2]
            and dtype == bi.dtype
        ):
            if allow_tf32 is not None:
                tf32 = boolean(allow_tf32, "allow_tf32", "matmul")
            else:  # the variable only changes float32 products: read it only for them
                tf32 = dtype == "float32" and allow_tf32_default()
            return _wrap(backend.matmul_new(ai, bi, bool(tf32)), backend)
    return _matmul_general(a, b, out, allow_tf32)


def _matmul_general(a: Any, b: Any, out: GPUArray | None, allow_tf32: bool | None) -> GPUArray:
    """:func:`matmul` for every case: broadcasting, vectors, promotion, ``out``."""
    a = _as_operand(a, "a")
    b = _as_operand(b, "b")
    if out is not None:
        out_array(out, "matmul")
    if allow_tf32 is not None:
        allow_tf32 = boolean(allow_tf32, "allow_tf32", "matmul")
    if a._backend is not b._backend:
        raise ValueError("matmul: operands live on different backends")
    ashape, bshape = tuple(a._impl.shape), tuple(b._impl.shape)
    if not ashape or not bshape:
        raise ValueError("matmul: operands must have at least one dimension (use * for scalars)")
    a_vec, b_vec = len(ashape) == 1, len(bshape) == 1
    if a_vec:
        a = a.reshape(1, ashape[0])
    if b_vec:
        b = b.reshape(bshape[0], 1)
    ashape, bshape = tuple(a._impl.shape), tuple(b._impl.shape)
    m, k = ashape[-2:]
    k2, n = bshape[-2:]
    if k != k2:
        raise ValueError(
            f"matmul: mismatch in the contracted dimension: {ashape} @ {bshape} ({k} != {k2})"
        )
    try:
        batch = tuple(np.broadcast_shapes(ashape[:-2], bshape[:-2]))
    except ValueError:
        raise ValueError(
            f"matmul: batch dimensions {ashape[:-2]} and {bshape[:-2]} do not broadcast"
        ) from None
    shape = batch + ((m,) if not a_vec else ()) + ((n,) if not b_vec else ())
    dtype = result_dtype(a.dtype, b.dtype)
    name = NAMES[dtype]
    if a.dtype != dtype:
        a = a.astype(dtype)
    if b.dtype != dtype:
        b = b.astype(dtype)
    if allow_tf32 is None:
        allow_tf32 = allow_tf32_default()
    backend = a._backend
    if out is not None and tuple(out.shape) != shape:
        raise ValueError(f"matmul: out has shape {tuple(out.shape)}, the result is {shape}")
    a3 = _batched(a, batch)
    b3 = _batched(b, batch)
    nbatch = a3._impl.shape[0]  # == b3's: both were broadcast to `batch`
    direct = (
        out is not None
        and out.dtype == dtype
        and out.is_contiguous()
        and not _shares_buffer(out, a3)
        and not _shares_buffer(out, b3)
    )
    if direct:
        assert out is not None
        target = out._impl
        result3 = backend.view(
            target,
            (nbatch, m, n),
            _indexing.c_strides((nbatch, m, n), target.itemsize),
            backend.offset(target),
        )
    else:
        result3 = backend.empty((nbatch, m, n), name, backend.device_of(a._impl), None)
    backend.matmul(a3._impl, b3._impl, result3, bool(allow_tf32))
    result = _wrap(result3, backend).reshape(shape)
    if out is None:
        return result
    if not direct:
        backend.copy_into(out._impl, result._impl)
    return out


def matmul_nt(
    x: GPUArray,
    weight: GPUArray,
    out: GPUArray | None = None,
    allow_tf32: bool | None = None,
) -> GPUArray:
    """``x @ weight.T`` in one backend call: PyTorch's ``linear`` without a bias.

    For callers that have validated their operands (the ops package's linear layers): ``x``
    C-contiguous ``[..., K]``, ``weight`` ``[N, K]`` of the same dtype (any strides: it is read
    transposed in place). ``out``, when given, is writeable, C-contiguous, of the same dtype and
    ``M * N`` elements (``M`` the product of ``x``'s leading dimensions), not overlapping ``x``
    or ``weight``, and is returned; without it a new ``[..., N]`` array is. Shapes, contiguity
    and dtypes are checked again where the work is done (a ``ValueError``); overlaps are not.
    """
    backend = x._backend
    if weight._backend is not backend or (out is not None and out._backend is not backend):
        raise ValueError("matmul_nt: operands live on different backends")
    if allow_tf32 is None:
        tf32 = x._impl.dtype == "float32" and allow_tf32_default()
    else:
        tf32 = boolean(allow_tf32, "allow_tf32", "matmul_nt")
    if out is None:
        return _wrap(backend.matmul_nt_new(x._impl, weight._impl, bool(tf32)), backend)
    backend.matmul_nt(x._impl, weight._impl, out._impl, bool(tf32))
    return out


def _shares_buffer(x: GPUArray, y: GPUArray) -> bool:
    bx, by = x._backend, y._backend
    start_x = bx.data_ptr(x._impl) - bx.offset(x._impl)
    start_y = by.data_ptr(y._impl) - by.offset(y._impl)
    return bool(start_x == start_y)
