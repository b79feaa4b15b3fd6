"""pygpukit.ops.skinny_linear on the GPU: the skinny-M tensor-core kernel vs float64."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import linear_ref, rel_err

import pygpukit as gp
from pygpukit.ops import config, skinny_linear
from pygpukit.ops.layers import Linear
from pygpukit.ops.skinny_linear import SkinnyPlan

pytestmark = pytest.mark.gpu

LIMITS = {np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}
HALF = [gp.float16, gp.bfloat16]
# (N, K): odd N (a partial 128-row tile, a partial 16-row warp tile), K not a multiple of the
# 128-k weight block or the 256-k x chunk, a long K (down_proj's), one 8-wide K.
SHAPES = [(131, 200), (1000, 4104), (257, 14336), (37, 8)]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("m", [1, 3, 16, 17, 64])
def test_skinny_linear_matches_float64(
    rand: Callable[..., np.ndarray], m: int, shape: tuple[int, int], dtype: object
) -> None:
    n, k = shape
    x, w, b = rand((m, k), dtype), rand((n, k), dtype), rand((n,), dtype)
    y = skinny_linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b))
    assert y.shape == (m, n) and y.dtype == np.dtype(dtype)
    assert rel_err(y.to_numpy(), linear_ref(x, w, b, None)) < LIMITS[np.dtype(dtype)]


@pytest.mark.parametrize("splits", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [3, 64])
def test_every_split_gives_the_float32_sums(
    rand: Callable[..., np.ndarray], m: int, splits: int
) -> None:
    """float32 output: the fp32 sums unrounded, within fp32 accumulation error of float64, for
    every split of K (the cluster reduction adds the partial tiles). The tensor cores' fp32 adds
    truncate, so the limit is a few times fp32's; a bfloat16-rounded result would be near 2e-3."""
    n, k = 300, 2048 + 8  # 9 chunks of 256 k: each split gets one or more, the last a tail
    x, w = rand((m, k), gp.bfloat16), rand((n, k), gp.bfloat16)
    y = skinny_linear(gp.from_numpy(x), gp.from_numpy(w), out_dtype=gp.float32, splits=splits)
    assert y.dtype == np.float32
    got = y.to_numpy()
    assert rel_err(got, linear_ref(x, w, None, None)) < 3e-5
    assert np.mean(got != got.astype(gp.bfloat16).astype(np.float32)) > 0.5  # not rounded


def test_results_are_the_same_bits_on_every_run(rand: Callable[..., np.ndarray]) -> None:
    """The split-K partials meet in a fixed order: no run-to-run rounding differences."""
    x, w = rand((64, 4096), gp.bfloat16), rand((512, 4096), gp.bfloat16)
    gx, gw = gp.from_numpy(x), gp.from_numpy(w)
    first = skinny_linear(gx, gw, splits=8).to_numpy()
    for _ in range(3):
        assert np.array_equal(skinny_linear(gx, gw, splits=8).to_numpy(), first)


def test_out_receives_the_result(rand: Callable[..., np.ndarray]) -> None:
    x, w = rand((16, 1024), gp.float16), rand((640, 1024), gp.float16)
    out = gp.from_numpy(rand((16, 640), gp.float16))
    got = skinny_linear(gp.from_numpy(x), gp.from_numpy(w), out=out)
    assert got is out
    assert rel_err(out.to_numpy(), linear_ref(x, w, None, None)) < 3e-3


@pytest.mark.parametrize("m", [16, 64])
def test_linear_layers_run_it_when_preferred(rand: Callable[..., np.ndarray], m: int) -> None:
    """skinny_linear=on: Linear (with a bias) and a float32-output head take the skinny plan
    and match float64; the head's sums are stored unrounded."""
    x, w, b = (
        rand((m, 4096), gp.bfloat16),
        rand((1536, 4096), gp.bfloat16),
        rand((1536,), gp.bfloat16),
    )
    with config.override(skinny_linear="on"):
        layer = Linear(gp.from_numpy(w), gp.from_numpy(b))
        head = Linear(gp.from_numpy(w), out_dtype=gp.float32)
        assert isinstance(layer.plan(m), SkinnyPlan) and isinstance(head.plan(m), SkinnyPlan)
        y = layer(gp.from_numpy(x)).to_numpy()
        logits = head(gp.from_numpy(x)).to_numpy()
    assert rel_err(y, linear_ref(x, w, b, None)) < 1e-2
    assert rel_err(logits, linear_ref(x, w, None, None)) < 3e-5


def test_it_replays_in_a_cuda_graph(rand: Callable[..., np.ndarray]) -> None:
    """A decode step captures its GEMMs in a CUDA graph: the cluster launches replay too."""
    x, w = rand((32, 4096), gp.bfloat16), rand((4096, 4096), gp.bfloat16)
    gx, gw = gp.from_numpy(x), gp.from_numpy(w)
    out = gp.empty((32, 4096), gp.bfloat16)
    stream = gp.Stream()
    with stream:
        skinny_linear(gx, gw, out=out)  # plans outside the capture
    stream.synchronize()
    with stream, gp.graph_capture() as graph:
        skinny_linear(gx, gw, out=out)
    with stream:  # cleared on the replay's stream, so the replay must write it again
        out[...] = gp.from_numpy(np.zeros((32, 4096), gp.bfloat16))
    graph.replay(stream)
    stream.synchronize()
    assert rel_err(out.to_numpy(), linear_ref(x, w, None, None)) < 1e-2
