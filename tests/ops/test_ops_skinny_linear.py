"""pygpukit.ops.skinny_linear on the current backend (CPU in CI): results, arguments, the split."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np
import pytest
from ops_references import linear_ref, rel_err

import pygpukit as gp
from pygpukit.ops import (
    SKINNY_MAX_ROWS,
    SkinnyRule,
    config,
    linear,
    skinny_linear,
    skinny_preferred,
    skinny_splits,
)
from pygpukit.ops.layers import Linear

# The module (pygpukit.ops.skinny_linear is the function of that name).
skinny_module = importlib.import_module("pygpukit.ops.skinny_linear")
LIMITS = {np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}


@pytest.mark.parametrize("dtype", [gp.float16, gp.bfloat16])
@pytest.mark.parametrize("m", [1, 3, 16, 64])
def test_skinny_linear_matches_float64(
    rand: Callable[..., np.ndarray], m: int, dtype: object
) -> None:
    n, k = 37, 40  # odd N, K a multiple of 8 but not of the kernel's 128-k block
    x, w, b = rand((m, k), dtype), rand((n, k), dtype), rand((n,), dtype)
    y = skinny_linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b))
    assert y.shape == (m, n) and y.dtype == np.dtype(dtype)
    assert rel_err(y.to_numpy(), linear_ref(x, w, b, None)) < LIMITS[np.dtype(dtype)]


def test_float32_output_and_out(rand: Callable[..., np.ndarray]) -> None:
    x, w = rand((5, 64), gp.bfloat16), rand((24, 64), gp.bfloat16)
    out = gp.empty((5, 24), gp.float32)
    got = skinny_linear(gp.from_numpy(x), gp.from_numpy(w), out=out, out_dtype=gp.float32)
    assert got is out
    assert rel_err(out.to_numpy(), linear_ref(x, w, None, None)) < 1e-6


@pytest.mark.parametrize(
    ("m", "k", "kwargs", "error"),
    [
        (SKINNY_MAX_ROWS + 1, 16, {}, ValueError),  # too many rows
        (4, 12, {}, ValueError),  # K not a multiple of 8
        (4, 16, {"splits": 3}, ValueError),
        (4, 16, {"out_dtype": gp.float16}, TypeError),  # neither x's dtype nor float32
    ],
)
def test_bad_arguments_are_refused(
    rand: Callable[..., np.ndarray], m: int, k: int, kwargs: dict, error: type
) -> None:
    x, w = rand((m, k), gp.bfloat16), rand((8, k), gp.bfloat16)
    with pytest.raises(error):
        skinny_linear(gp.from_numpy(x), gp.from_numpy(w), **kwargs)


def test_mismatched_shapes_and_dtypes_are_refused(rand: Callable[..., np.ndarray]) -> None:
    x = gp.from_numpy(rand((4, 16), gp.bfloat16))
    with pytest.raises(ValueError, match="K"):
        skinny_linear(x, gp.from_numpy(rand((8, 24), gp.bfloat16)))
    with pytest.raises(TypeError):
        skinny_linear(x, gp.from_numpy(rand((8, 16), gp.float16)))
    with pytest.raises(TypeError):
        skinny_linear(gp.from_numpy(rand((4, 16))), gp.from_numpy(rand((8, 16))))
    with pytest.raises(ValueError):
        skinny_linear(x, gp.from_numpy(rand((8, 16), gp.bfloat16)),
                      gp.from_numpy(rand((7,), gp.bfloat16)))  # fmt: skip


def test_split_fills_one_wave_of_two_ctas_per_sm() -> None:
    """The Llama-3.1-8B shapes on 132 SMs: N / 128 tiles times the split stays within 264."""
    assert skinny_splits(6144, 4096, 132) == 4  # 48 tiles
    assert skinny_splits(4096, 4096, 132) == 8  # 32 tiles (8 is the largest split)
    assert skinny_splits(4096, 14336, 132) == 8
    assert skinny_splits(28672, 4096, 132) == 1  # 224 tiles fill the GPU alone
    assert skinny_splits(4096, 256, 132) == 1  # one 256-k chunk: nothing to split
    assert skinny_splits(4096, 4096, 132, clusters=False) == 1


def test_preferred_only_where_the_kernel_runs() -> None:
    with config.override(skinny_linear="on"):
        assert skinny_preferred(16, 4096, 4096, gp.bfloat16)
        assert not skinny_preferred(16, 4096, 4096, np.float32)
        assert not skinny_preferred(65, 4096, 4096, gp.bfloat16)
        assert not skinny_preferred(16, 4096, 4100, gp.float16)
    with config.override(skinny_linear="off"):
        assert not skinny_preferred(16, 4096, 4096, gp.bfloat16)


def test_linear_layer_takes_the_skinny_plan_when_preferred(
    rand: Callable[..., np.ndarray],
) -> None:
    """A float32-output layer at 16 rows: the skinny plan stores the sums unrounded, the
    cuBLASLt path rounds them to bfloat16 first."""
    x, w = rand((16, 64), gp.bfloat16), rand((40, 64), gp.bfloat16)
    ref = linear_ref(x, w, None, None)
    with config.override(skinny_linear="on"):
        layer = Linear(gp.from_numpy(w), out_dtype=gp.float32)
        on = layer(gp.from_numpy(x)).to_numpy()
        assert rel_err(linear(gp.from_numpy(x), gp.from_numpy(w)).to_numpy(), ref) < 1e-2
    with config.override(skinny_linear="off"):
        off = Linear(gp.from_numpy(w), out_dtype=gp.float32)(gp.from_numpy(x)).to_numpy()
    assert rel_err(on, ref) < 1e-6
    assert rel_err(off, ref) > 1e-4  # rounded to bfloat16 (about 2e-3)


def test_rule_covers_its_ranges() -> None:
    rule = SkinnyRule(rows=(16, 64), n=(4096, 6144))
    assert rule.covers(16, 4096, 4096) and rule.covers(64, 6144, 14336)
    assert not rule.covers(8, 4096, 4096) and not rule.covers(16, 28672, 4096)
    assert not SkinnyRule(rows=(1, 64), k=(8, 4096)).covers(16, 4096, 14336)


@pytest.mark.parametrize(
    ("device", "m", "expected"),
    [("NVIDIA H100 80GB HBM3", 16, True), ("NVIDIA H100 80GB HBM3", 8, False),
     ("NVIDIA H200", 16, False)],
)  # fmt: skip
def test_auto_follows_the_rules_of_this_gpu_model(
    monkeypatch: pytest.MonkeyPatch, device: str, m: int, expected: bool
) -> None:
    monkeypatch.setattr(skinny_module, "SKINNY_AUTO", {"H100": (SkinnyRule(rows=(16, 64)),)})
    monkeypatch.setattr(
        skinny_module.gp, "get_device_info", lambda _d=None: {"sm": (9, 0), "name": device}
    )
    with config.override(skinny_linear="auto"):
        assert skinny_preferred(m, 4096, 4096, gp.bfloat16) is expected
