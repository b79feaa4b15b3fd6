"""pygpukit.ops.dequantize against a GGUF-spec reference written element by element."""

from __future__ import annotations

import numpy as np
import pytest
from ggml_reference import dequantize_reference, quantize

import pygpukit as gp
from pygpukit.ops import dequantize

DTYPES = [np.float32, gp.float16, gp.bfloat16]
BLOCK_TYPES = ["Q8_0", "Q4_0", "Q4_1"]


def _weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # Per-row scales spread over a few decades, with an offset: exercises d and m of each block.
    scale = np.exp(rng.uniform(-4, 1, size=(*shape[:-1], 1)))
    return (rng.standard_normal(shape) * scale + rng.uniform(-0.5, 0.5)).astype(np.float32)


@pytest.mark.parametrize("kind", BLOCK_TYPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_block_types_match_the_spec_reference(rng, kind, dtype):
    shape = (int(rng.integers(1, 5)), 32 * int(rng.integers(1, 6)))
    raw = quantize(_weights(rng, shape), kind)
    expected = dequantize_reference(raw, kind).reshape(shape)
    got = dequantize(gp.from_numpy(raw), kind, shape, dtype)
    assert got.shape == shape and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.to_numpy(), expected.astype(dtype))


@pytest.mark.parametrize("kind", BLOCK_TYPES)
def test_dequantized_values_are_close_to_the_quantized_weights(rng, kind):
    # An independent check of the reference itself: within half a step of x (a full step at
    # Q4_0's clamped end, where 16 levels cover [-amax, 7/8 amax]).
    w = _weights(rng, (3, 128))
    got = dequantize(gp.from_numpy(quantize(w, kind)), kind, w.shape).to_numpy()
    blocks = w.reshape(-1, 32)
    spread = np.abs(blocks).max(1) if kind != "Q4_1" else blocks.max(1) - blocks.min(1)
    half_step = spread / {"Q8_0": 254, "Q4_0": 8, "Q4_1": 30}[kind]
    err = np.abs(got.reshape(-1, 32) - blocks)
    assert (err <= half_step[:, None] * 1.02 + 1e-3 * spread[:, None]).all()


@pytest.mark.parametrize("kind", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_float_types_are_cast(rng, kind, dtype):
    stored = {"F32": np.float32, "F16": np.float16, "BF16": gp.bfloat16}[kind]
    values = rng.standard_normal((4, 6)).astype(stored)
    raw = np.frombuffer(values.tobytes(), np.uint8).copy()
    got = dequantize(gp.from_numpy(raw), kind, values.shape, dtype)
    np.testing.assert_array_equal(got.to_numpy(), values.astype(np.float32).astype(dtype))


def test_type_ids_are_accepted(rng):
    raw = quantize(_weights(rng, (2, 32)), "Q4_1")
    by_name = dequantize(gp.from_numpy(raw), "q4_1", (2, 32)).to_numpy()
    by_id = dequantize(gp.from_numpy(raw), 3, (2, 32)).to_numpy()
    np.testing.assert_array_equal(by_name, by_id)


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", 12, "IQ2_XS", "nope"])
def test_unsupported_types_name_the_type(kind):
    with pytest.raises(ValueError, match=str(kind)):
        dequantize(gp.from_numpy(np.zeros(144, np.uint8)), kind, (256,))


def test_size_and_shape_are_checked(rng):
    raw = gp.from_numpy(quantize(_weights(rng, (2, 32)), "Q8_0"))
    with pytest.raises(ValueError, match="is 102 contiguous bytes"):
        dequantize(raw, "Q8_0", (3, 32))
    with pytest.raises(ValueError, match="blocks of 32 elements"):
        dequantize(raw, "Q8_0", (64, 1))
    with pytest.raises(TypeError, match="uint8"):
        dequantize(gp.from_numpy(np.zeros(17, np.int8)), "Q8_0", (32,))
    with pytest.raises(ValueError, match="dtype"):
        dequantize(raw, "Q8_0", (2, 32), np.int32)
