"""Test-wide setup: the `gpu` marker.

Tests marked `gpu` run only when PyGPUkit's CUDA backend is active; elsewhere they
are skipped. On the GPU machine `tools/gpu_check.sh` sets PYGPUKIT_REQUIRE_GPU=1 so
a missing GPU fails the run instead of skipping every test silently.
"""

from __future__ import annotations

import os

import pytest


def _cuda_available() -> bool:
    import pygpukit as gp

    check = getattr(gp, "is_cuda_available", None)
    return bool(check and check())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items or _cuda_available():
        return
    if os.environ.get("PYGPUKIT_REQUIRE_GPU") == "1":
        raise pytest.UsageError("PYGPUKIT_REQUIRE_GPU=1 but PyGPUkit found no usable CUDA GPU")
    skip = pytest.mark.skip(reason="needs a CUDA GPU (SM 80+)")
    for item in gpu_items:
        item.add_marker(skip)
