"""pygpukit.ops.linear on the GPU: the GEMV kernels and the matmul + epilogue path vs float64."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import linear_ref, rel_err

import pygpukit as gp
from pygpukit.ops import config, gemv, linear
from pygpukit.ops.linear import ACTIVATIONS, GEMV_VARIANTS

pytestmark = pytest.mark.gpu

# GEMV: fp32 accumulation, one rounding. The M > 8 path rounds the matmul result and then the
# biased/activated value: two roundings, still well inside these limits.
LIMITS = {np.dtype(gp.float32): 1e-5, np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}
HALF = [gp.float16, gp.bfloat16]


# (N, K): vector kernel with a partial last warp of rows and a chunk tail (K = 8 * 513),
# a long row, and the scalar kernel (K not a multiple of 8).
SHAPES = [(37, 4104), (1025, 14336), (129, 203), (7, 8)]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("m", range(1, 9))
def test_gemv_matches_float64(
    rand: Callable[..., np.ndarray], m: int, shape: tuple[int, int], dtype: object
) -> None:
    n, k = shape
    x, w = rand((m, k), dtype), rand((n, k), dtype)
    y = gemv(gp.from_numpy(x), gp.from_numpy(w))
    assert y.shape == (m, n)
    assert rel_err(y.to_numpy(), linear_ref(x, w, None, None)) < LIMITS[np.dtype(dtype)]


@pytest.mark.parametrize("variant", list(GEMV_VARIANTS))
@pytest.mark.parametrize("shape", [(37, 4104), (1025, 14336), (3, 8), (100, 1024)])
@pytest.mark.parametrize("m", range(1, 9))
def test_gemv_variants(
    rand: Callable[..., np.ndarray], m: int, shape: tuple[int, int], variant: str
) -> None:
    """Each vector kernel pinned, at every M (the default uses one per M), vs float64, with bias
    and activation, in both dtypes."""
    n, k = shape
    x, w, b = rand((m, k), gp.bfloat16), rand((n, k), gp.bfloat16), rand((n,), gp.bfloat16)
    f16 = rand((m, k), gp.float16), rand((n, k), gp.float16)
    with config.override(gemv_variant=variant):
        got = linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b), activation="silu")
        y = gemv(gp.from_numpy(f16[0]), gp.from_numpy(f16[1]))
    assert rel_err(got.to_numpy(), linear_ref(x, w, b, "silu")) < 1e-2
    assert rel_err(y.to_numpy(), linear_ref(f16[0], f16[1], None, None)) < 3e-3


@pytest.mark.parametrize("m", [1, 3, 8])
def test_gemv_unaligned_view_uses_the_scalar_kernel(
    rand: Callable[..., np.ndarray], m: int
) -> None:
    n, k = 45, 64
    flat, w = rand((m * k + 1,), gp.bfloat16), rand((n, k), gp.bfloat16)
    x = gp.from_numpy(flat)[1:].reshape(m, k)  # 2-byte offset: not 16-byte aligned
    y = gemv(x, gp.from_numpy(w))
    assert rel_err(y.to_numpy(), linear_ref(flat[1:].reshape(m, k), w, None, None)) < 1e-2


def test_gemv_into_out_and_vector_x(rand: Callable[..., np.ndarray]) -> None:
    x, w = rand((4096,), gp.bfloat16), rand((301, 4096), gp.bfloat16)
    out = gp.empty((301,), gp.bfloat16)
    assert gemv(gp.from_numpy(x), gp.from_numpy(w), out=out) is out
    assert rel_err(out.to_numpy(), linear_ref(x[None], w, None, None)[0]) < 1e-2


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("m", [1, 8, 9, 200])
@pytest.mark.parametrize("dtype", [gp.float32, gp.float16, gp.bfloat16])
def test_linear_matches_float64(
    rand: Callable[..., np.ndarray], dtype: object, m: int, with_bias: bool, activation: str | None
) -> None:
    n, k = 257, 1024
    x, w, b = rand((m, k), dtype), rand((n, k), dtype), rand((n,), dtype)
    bias = gp.from_numpy(b) if with_bias else None
    y = linear(gp.from_numpy(x), gp.from_numpy(w), bias, activation=activation)
    expected = linear_ref(x, w, b if with_bias else None, activation)
    assert rel_err(y.to_numpy(), expected) < LIMITS[np.dtype(dtype)]


def test_linear_leading_dims_and_out(rand: Callable[..., np.ndarray]) -> None:
    x, w, b = rand((2, 3, 512), gp.bfloat16), rand((99, 512), gp.bfloat16), rand((99,), gp.bfloat16)
    out = gp.empty((2, 3, 99), gp.bfloat16)
    y = linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b), activation="gelu", out=out)
    assert y is out
    expected = linear_ref(x.reshape(6, 512), w, b, "gelu").reshape(2, 3, 99)
    assert rel_err(out.to_numpy(), expected) < 1e-2


@pytest.mark.parametrize("dtype", [gp.bfloat16, gp.float16, gp.float32])
@pytest.mark.parametrize("lead", [(9,), (16,), (128,), (2, 300)])
def test_plain_product_equals_general_path(
    rand: Callable[..., np.ndarray], dtype: object, lead: tuple[int, ...]
) -> None:
    """``linear(x, w)`` (one runtime call) gives bit for bit what the general path (``out=``)
    gives, and the float64 product within the dtype's limit."""
    k, n = 512, 384
    x, w = rand((*lead, k), dtype), rand((n, k), dtype)
    gx, gw = gp.from_numpy(x), gp.from_numpy(w)
    fast = linear(gx, gw)
    general = linear(gx, gw, out=gp.empty((*lead, n), dtype))
    assert fast.shape == general.shape == (*lead, n)
    np.testing.assert_array_equal(fast.to_numpy(), general.to_numpy())
    expected = linear_ref(x.reshape(-1, k), w, None, None).reshape(*lead, n)
    assert rel_err(fast.to_numpy(), expected) < LIMITS[np.dtype(dtype)]


@pytest.mark.parametrize("m", [1, 4, 8, 16])
def test_linear_matches_torch(rand: Callable[..., np.ndarray], m: int) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    x, w, b = rand((m, 4096), np.float32), rand((1000, 4096), np.float32), rand((1000,), np.float32)
    x16, w16, b16 = (a.astype(gp.bfloat16) for a in (x, w, b))
    got = linear(gp.from_numpy(x16), gp.from_numpy(w16), gp.from_numpy(b16), activation="silu")
    tx, tw, tb = (
        torch.from_numpy(a).cuda().to(torch.bfloat16)
        for a in (x16.astype(np.float32), w16.astype(np.float32), b16.astype(np.float32))
    )
    want = torch.nn.functional.silu(torch.nn.functional.linear(tx, tw, tb)).float().cpu().numpy()
    assert rel_err(got.to_numpy(), want.astype(np.float64)) < 1e-2


# A language model's head: SmolLM2's [vocab 49152, hidden 576] (K = 576 = 72 chunks of 8: more
# than 64, so the simt loop makes a partial second pass), and K = 577 for the scalar kernel.
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("k", [576, 577])
@pytest.mark.parametrize("m", [1, 2, 8])
@pytest.mark.parametrize("variant", sorted(GEMV_VARIANTS))
def test_gemv_float32_out_at_lm_head_shape(
    rand: Callable[..., np.ndarray], m: int, k: int, dtype: object, variant: str
) -> None:
    x, w = rand((m, k), dtype), rand((49152, k), dtype)
    with config.override(gemv_variant=variant):
        y = gemv(gp.from_numpy(x), gp.from_numpy(w), out_dtype=gp.float32).to_numpy()
    assert y.dtype == np.float32 and y.shape == (m, 49152)
    ref = linear_ref(x, w, None, None)
    assert rel_err(y, ref) < 1e-5
    assert np.mean(y != y.astype(dtype).astype(np.float32)) > 0.5  # unrounded fp32 sums
    assert np.array_equal(y.argmax(-1), ref.argmax(-1))
