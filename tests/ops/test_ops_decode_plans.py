"""The fused decode kernels' CUDA launch plans, built on any backend against recording kernels.

``decode_linear`` (every epilogue, the gather, every rows-per-warp entry point) and
``decode_argmax`` go through their CUDA binding with stand-in kernels that check each launch's
arguments against the entry point's declared parameters (tests/ops/test_ops_plans.py), so a
binding that would pass its arguments in the wrong number or kind fails without a GPU.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from test_ops_plans import Recorder

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import _kernel_loader as kl

_linear = sys.modules["pygpukit.ops.decode_linear"]
_head = sys.modules["pygpukit.ops.decode_head"]
Rand = Callable[..., np.ndarray]


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Any, Any, int]]]:
    """Every launch, through recording kernels; the CUDA bindings run on any backend."""
    seen: list[tuple[str, Any, Any, int]] = []
    kernels: dict[tuple[str, str], Recorder] = {}

    def kernel(file: str, func: str) -> Recorder:
        return kernels.setdefault((file, func), Recorder(file, func, seen))

    monkeypatch.setattr(kl, "kernel", kernel)
    monkeypatch.setattr(_linear, "_bind_backend", _linear._bind_cuda)
    monkeypatch.setattr(_head, "_bind_backend", _head._bind_cuda)
    _linear.PLANS.clear()
    _head.PLANS.clear()
    yield seen
    _linear.PLANS.clear()  # the plans hold recording kernels
    _head.PLANS.clear()


def up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize(("plain", "paired"), [(4, 4), (2, 2), (1, 4), (1, 2)])
def test_decode_linear_plans(launches, monkeypatch, rand: Rand, plain: int, paired: int) -> None:
    monkeypatch.setattr(_linear, "ONE_PASS", False)
    monkeypatch.setitem(_linear.ROWS_PER_WARP, "plain", plain)
    monkeypatch.setitem(_linear.ROWS_PER_WARP, "paired", paired)
    dt, k, n, hq, hkv, d = "bfloat16", 64, 40, 2, 1, 16
    x, w, nw = up(rand((k,), dt)), up(rand((n, k), dt)), up(rand((k,), dt))
    res = up(rand((n,), dt))
    ops.decode_linear(x, w, up(rand((n,), dt)), norm_weight=nw)
    ops.decode_linear(x, w, norm_weight=nw, out_dtype=gp.float32)
    ops.decode_linear(x, w, epilogue="residual", residual=res)
    ops.decode_linear(x, up(rand((2 * n, k), dt)), norm_weight=nw, epilogue="swiglu")
    kc, vc = gp.zeros((1, hkv, 8, d), dt), gp.zeros((1, hkv, 8, d), dt)
    cos, sin = ops.rope_cos_sin(32, d)
    rope = ops.RopeKV(cos, sin, up(np.array([3], np.int32)), kc, vc, hq)
    table, row = up(rand((50, k), dt)), gp.zeros((k,), dt)
    ops.decode_linear(table, up(rand(((hq + 2 * hkv) * d, k), dt)), norm_weight=nw,
                      epilogue="rope_kv", rope_kv=rope, gather_ids=up(np.array([7], np.int32)),
                      gather_out=row)  # fmt: skip
    suffix = {4: "", 2: "_r2", 1: "_r1"}
    names = [name for name, *_ in launches]
    plain_name = f"decode_linear{suffix[plain]}_bf16"
    paired_name = f"decode_linear{suffix[paired]}_bf16"
    assert names == [plain_name] * 3 + [paired_name] * 2
    grids = [grid for _, grid, *_ in launches]
    assert grids[0] == -(-n // (4 * plain)) and grids[3] == -(-2 * n // (4 * paired))


@pytest.mark.parametrize("k", [64, 1024, 1032])
def test_one_pass_kernel_takes_rows_up_to_1024(launches, monkeypatch, rand: Rand, k: int) -> None:
    monkeypatch.setattr(_linear, "ONE_PASS", True)
    monkeypatch.setitem(_linear.ROWS_PER_WARP, "plain", 4)
    monkeypatch.setitem(_linear.ROWS_PER_WARP, "paired", 4)
    dt, n = "float16", 24
    x, nw, res = up(rand((k,), dt)), up(rand((k,), dt)), up(rand((n,), dt))
    ops.decode_linear(x, up(rand((n, k), dt)), epilogue="residual", residual=res)
    ops.decode_linear(x, up(rand((2 * n, k), dt)), norm_weight=nw, epilogue="swiglu")
    want = "decode_linear_short_f16" if k <= 1024 else "decode_linear_f16"
    assert [name for name, *_ in launches] == [want, want]


def test_default_layouts_of_small_and_large_models() -> None:
    """Small models' GEMVs (measured at the 0.5B and 135M shapes): paired ones 2 rows a warp,
    plain ones of few rows 1; 8B-sized GEMVs keep 4; the one-pass kernel only on request."""
    layouts = {}
    for name, (n, k, pair) in {
        "qwen qkv": (1152, 896, 32), "qwen o": (896, 896, 0), "qwen gate_up": (9728, 896, 4864),
        "qwen down": (896, 4864, 0), "smollm down": (576, 1536, 0),
        "8b qkv": (6144, 4096, 64), "8b o": (4096, 4096, 0), "8b down": (4096, 14336, 0),
    }.items():  # fmt: skip
        rows = _linear.rows_per_warp(n, k, pair, 2)
        layouts[name] = (rows, _linear._one_pass(k, rows))
    assert layouts == {
        "qwen qkv": (2, False), "qwen o": (1, False), "qwen gate_up": (2, False),
        "qwen down": (1, False), "smollm down": (1, False),
        "8b qkv": (4, False), "8b o": (4, False), "8b down": (4, False),
    }  # fmt: skip


def test_rows_per_warp_refuses_a_layout_without_whole_pairs(monkeypatch) -> None:
    monkeypatch.setitem(_linear.ROWS_PER_WARP, "paired", 1)
    with pytest.raises(ValueError, match="rows per warp"):
        _linear.rows_per_warp(64, 64, 8)


@pytest.mark.parametrize("advance", [False, True])
@pytest.mark.parametrize("logits", [False, True])
def test_decode_argmax_plan(launches, rand: Rand, advance: bool, logits: bool) -> None:
    dt, n, k = "float16", 1000, 64
    x, w, nw = up(rand((k,), dt)), up(rand((n, k), dt)), up(rand((k,), dt))
    out = gp.zeros((1,), gp.int32)
    state = None
    if advance:
        i32 = gp.int32
        state = ops.SequenceState(gp.zeros((1,), i32), gp.zeros((1,), i32), gp.zeros((1,), i32),
                                  gp.zeros((20,), i32), 16)  # fmt: skip
    f32 = gp.zeros((n,), gp.float32) if logits else None
    ops.decode_argmax(x, w, out=out, norm_weight=nw, logits=f32, advance=state)
    ((name, grid, block, shared),) = launches
    assert name == "decode_head_argmax_f16" and block == 128 and shared == k * 2
    assert 1 <= grid <= -(-n // 16)
