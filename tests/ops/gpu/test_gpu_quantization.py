"""pygpukit.ops.dequantize on the GPU against the GGUF-spec reference (bit-exact)."""

from __future__ import annotations

import numpy as np
import pytest
from ggml_reference import dequantize_reference, quantize

import pygpukit as gp
from pygpukit.ops import dequantize

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1"])
@pytest.mark.parametrize("dtype", [np.float32, gp.float16, gp.bfloat16])
def test_gpu_block_types_match_the_reference(rng, kind, dtype):
    shape = (int(rng.integers(3, 40)), 32 * int(rng.integers(1, 9)))
    w = (rng.standard_normal(shape) * np.exp(rng.uniform(-4, 1, (shape[0], 1)))).astype(np.float32)
    raw = quantize(w, kind)
    expected = dequantize_reference(raw, kind).reshape(shape).astype(dtype)
    got = dequantize(gp.from_numpy(raw), kind, shape, dtype)
    np.testing.assert_array_equal(got.to_numpy(), expected)


@pytest.mark.parametrize("kind", ["F32", "F16", "BF16"])
def test_gpu_float_types_are_cast(rng, kind):
    stored = {"F32": np.float32, "F16": np.float16, "BF16": gp.bfloat16}[kind]
    values = rng.standard_normal((33, 70)).astype(stored)
    raw = np.frombuffer(values.tobytes(), np.uint8).copy()
    got = dequantize(gp.from_numpy(raw), kind, values.shape, gp.bfloat16)
    np.testing.assert_array_equal(got.to_numpy(), values.astype(np.float32).astype(gp.bfloat16))


def test_gpu_large_tensor_uses_the_grid_stride(rng):
    # More elements than 65535 blocks x 256 threads: the grid-stride loop covers the rest.
    shape = (4096 + 7, 4608)
    raw = rng.integers(0, 256, size=shape[0] * shape[1] // 32 * 34, dtype=np.uint8)
    raw.reshape(-1, 34)[:, 1] &= 0x3B  # keep the fp16 scales finite
    got = dequantize(gp.from_numpy(raw), "Q8_0", shape, np.float32).to_numpy()
    blocks = raw.reshape(-1, 34)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    expected = (blocks[:, 2:].view(np.int8).astype(np.float32) * d).reshape(shape)
    np.testing.assert_array_equal(got, expected)
