"""gp.TensorMap on the GPU: a JIT kernel copies tiles through TMA; layouts TMA cannot describe."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp

pytestmark = pytest.mark.gpu

# One CTA per 32 x 32 box: a single thread loads the box with cp.async.bulk.tensor (completion on
# an mbarrier), then every thread writes it out, boxes over the edge included (to `out`, padded
# to whole boxes), so the zero fill of out-of-bounds elements is visible too.
TMA_COPY = r"""
#ifndef CUDA_VERSION
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
#endif
extern "C" __global__ void tma_copy(const __grid_constant__ CUtensorMap src, float* out,
                                    int out_cols) {
    __shared__ alignas(128) float tile[32 * 32];
    __shared__ alignas(8) unsigned long long bar;
    const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    const unsigned t = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 4096;" ::"r"(b)
                     : "memory");
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
            " [%0], [%1, {%2, %3}], [%4];" ::"r"(t),
            "l"(reinterpret_cast<unsigned long long>(&src)), "r"(blockIdx.x * 32),
            "r"(blockIdx.y * 32), "r"(b)
            : "memory");
    }
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;"
            " selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(b)
            : "memory");
    }
    for (int i = threadIdx.x; i < 32 * 32; i += blockDim.x) {
        const int r = blockIdx.y * 32 + i / 32, c = blockIdx.x * 32 + i % 32;
        out[(size_t)r * out_cols + c] = tile[i];
    }
}
"""


def _hopper() -> None:
    if tuple(gp.get_device_info()["sm"]) < (9, 0):
        pytest.skip("TMA needs SM 9.0 or newer")


@pytest.mark.parametrize("shape", [(64, 64), (100, 72), (33, 40)])
def test_tma_copy_through_a_jit_kernel(rand, shape):
    _hopper()
    rows, cols = shape
    host = rand(shape)
    src = gp.from_numpy(host)
    tmap = gp.TensorMap(src, (32, 32))
    gy, gx = -(-rows // 32), -(-cols // 32)
    out = gp.from_numpy(np.full((gy * 32, gx * 32), np.nan, np.float32))
    kern = gp.jit(TMA_COPY, "tma_copy")
    assert kern.params[0].code == "tmap"
    kern(tmap, out, gx * 32, grid=(gx, gy), block=128)
    got = out.to_numpy()
    np.testing.assert_array_equal(got[:rows, :cols], host)
    # Box elements past the array's edge arrive as zeros.
    assert np.all(got[rows:, :] == 0) and np.all(got[:, cols:] == 0)


def test_tma_copy_of_a_strided_view(rand):
    """A slice of rows and columns: the map takes the view's address and strides."""
    _hopper()
    host = rand((96, 128))
    view = gp.from_numpy(host)[8:72, 32:96]
    tmap = gp.TensorMap(view, (32, 32))
    out = gp.from_numpy(np.full((64, 64), np.nan, np.float32))
    gp.jit(TMA_COPY, "tma_copy")(tmap, out, 64, grid=(2, 2), block=128)
    np.testing.assert_array_equal(out.to_numpy(), host[8:72, 32:96])


def test_an_extent_one_dimension_may_have_any_stride(rand):
    """x[None] adds a dimension whose stride is never used (and need not be a multiple of 16):
    the map still encodes."""
    _hopper()
    host = rand((64, 64))
    a = gp.from_numpy(host)
    m3 = gp.TensorMap(a[None], (1, 32, 32))
    assert len(m3.to_bytes()) == 128


def test_encoded_bytes_and_repr(rand):
    _hopper()
    a = gp.from_numpy(rand((64, 64)))
    m = gp.TensorMap(a, (32, 32), swizzle=128)
    assert len(m.to_bytes()) == 128 and any(m.to_bytes())
    assert "box=(32, 32)" in repr(m) and m.array is a


@pytest.mark.parametrize(
    ("shape", "box", "swizzle", "match"),
    [
        ((64, 64), (32,), 0, "dimensions"),
        ((64, 64), (32, 300), 0, "1 to 256"),
        ((64, 64), (32, 32), 48, "swizzle"),
        ((64, 64), (32, 64), 128, "at most"),  # 256 bytes of row in a 128-byte swizzle
        ((64, 3), (32, 3), 0, "multiple of 16"),  # 12-byte box rows
        ((64, 6), (32, 4), 0, "stride"),  # 24-byte row stride
    ],
)
def test_layouts_tma_cannot_describe_raise_value_error(rand, shape, box, swizzle, match):
    a = gp.from_numpy(rand(shape))
    with pytest.raises(ValueError, match=match):
        gp.TensorMap(a, box, swizzle)


def test_transposed_view_is_refused(rand):
    a = gp.from_numpy(rand((64, 64))).T
    with pytest.raises(ValueError, match="contiguous"):
        gp.TensorMap(a, (32, 32))


def test_evictable_array_is_refused():
    a = gp.empty((64, 64), dtype="float32", evictable=True)
    with pytest.raises(ValueError, match="evictable"):
        gp.TensorMap(a, (32, 32))


def test_a_kernel_refuses_other_arguments_for_a_map(rand):
    _hopper()
    kern = gp.jit(TMA_COPY, "tma_copy")
    out = gp.empty((32, 32), dtype="float32")
    with pytest.raises(TypeError, match="TensorMap"):
        kern(out, out, 32, grid=1, block=128)
