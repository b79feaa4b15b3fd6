"""The CUDA backend's matmul: one ``_native`` call (``matmul``, ``matmul_new``, ``matmul_nt*``).

cuBLASLt is loaded on the first matmul from ``_environment.library_candidates("cublasLt")``
(never linked). ``PYGPUKIT_GEMM_BACKEND`` is read on every call: unset or ``auto`` uses
cuBLASLt where it loaded (else the own kernels), ``own`` the runtime's kernels, ``cublaslt``
cuBLASLt or a ``LibraryNotFoundError``.
"""

from __future__ import annotations

import os
from typing import Any

from .. import env
from .._environment import library_candidates, trace_library_load
from ..errors import LibraryNotFoundError
from .select import native

_native: Any = native()
_cublaslt: dict[str, Any] | None = None
_GEMM_ENV = "PYGPUKIT_GEMM_BACKEND"
#: The last raw value of the variable and the backend argument it gave (every matmul asks: one
#: environment read and a compare instead of the validating reader's few calls).
_last_backend: tuple[str | None, str] | None = None


def cublaslt_status() -> dict[str, Any]:
    """Load cuBLASLt once; ``{"loaded", "path", "tried", "version"}``."""
    global _cublaslt
    if _cublaslt is None:
        _cublaslt = dict(_native.load_cublaslt([c.path for c in library_candidates("cublasLt")]))
        trace_library_load("cublasLt", _cublaslt)
    return _cublaslt


def gemm_backend() -> str:
    """The GEMM backend ``PYGPUKIT_GEMM_BACKEND`` asks for now (``auto`` when unset)."""
    return env.choice("PYGPUKIT_GEMM_BACKEND")


def matmul(a: Any, b: Any, out: Any, allow_tf32: bool) -> None:
    """``out[z] = a[z] @ b[z]`` for 3-D impls of one dtype; ``out`` is C-contiguous."""
    _native.matmul(a, b, out, allow_tf32, _backend_arg(), None)


def _backend_arg() -> str:
    global _last_backend
    raw = os.environ.get(_GEMM_ENV)
    last = _last_backend
    if last is not None and last[0] == raw:
        return last[1]
    choice = gemm_backend()
    if choice != "own":
        status = cublaslt_status()
        if choice == "cublaslt" and not status["loaded"]:
            raise LibraryNotFoundError("cublasLt", status["tried"])
    _last_backend = (raw, choice)
    return choice


def matmul_new(a: Any, b: Any, allow_tf32: bool) -> Any:
    """``a @ b`` of two 2-D impls, or two 3-D impls of one batch size, into a new impl.

    One native call does the views, the allocation and the product: the host cost of a small
    matmul is this call, not a dozen Python-level steps.
    """
    return _native.matmul_new(a, b, allow_tf32, _backend_arg())


def matmul_nt(x: Any, w: Any, out: Any, allow_tf32: bool) -> None:
    """``out = x @ w.T`` for C-contiguous ``x`` [..., K] and ``out`` [..., N], ``w`` [N, K]."""
    _native.matmul_nt(x, w, out, allow_tf32, _backend_arg())


def matmul_nt_new(x: Any, w: Any, allow_tf32: bool) -> Any:
    """``x @ w.T`` into a new C-contiguous ``[..., N]`` impl, in one native call."""
    return _native.matmul_nt_new(x, w, allow_tf32, _backend_arg())


def matmul_implementation(dtype: str, allow_tf32: bool) -> str:
    """Which implementation a matmul of ``dtype`` runs now: cublaslt, mma, simt or naive."""
    choice = gemm_backend()
    if choice != "own":
        cublaslt_status()
    return str(_native.matmul_backend(dtype, allow_tf32, choice))
