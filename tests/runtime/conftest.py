"""Fixtures shared by the runtime tests."""

from __future__ import annotations

import pytest

import pygpukit as gp


@pytest.fixture(params=["own", "cublaslt"])
def gemm(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test under each GEMM backend (CPU backend: one NumPy path, run once)."""
    monkeypatch.delenv("PYGPUKIT_ALLOW_TF32", raising=False)
    if gp.backend_name() != "cuda":
        if request.param == "cublaslt":
            pytest.skip("the CPU backend has one matmul (NumPy)")
    elif request.param == "cublaslt":
        from pygpukit.backend import cuda_linalg

        if not cuda_linalg.cublaslt_status()["loaded"]:
            pytest.skip("cuBLASLt is not installed")
    monkeypatch.setenv("PYGPUKIT_GEMM_BACKEND", request.param)
    return str(request.param)
