"""ops.dynamic_quant_dequant against onnxruntime's DynamicQuantizeLinear + DequantizeLinear,
bit for bit, per row and over each row's valid part; its NumPy version against the definition;
argument errors; the CUDA plan's launch (one block per row) without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from dynamic_quant_reference import awkward_rows, onnxruntime_quant_dequant

import pygpukit as gp
from pygpukit.ops import _kernel_loader as kl
from pygpukit.ops import dynamic_quant
from pygpukit.ops.dynamic_quant import dynamic_quant_dequant
from pygpukit.ops.reference.dynamic_quant import quantization_parameters, quantize_dequantize


def test_reference_is_the_definition(rng):
    v = (rng.standard_normal(257) * 2).astype(np.float32)
    scale, zp = quantization_parameters(v)
    lo, hi = min(v.min(), 0), max(v.max(), 0)
    assert scale == np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255))
    assert zp == np.rint(np.clip(-np.float32(lo) / scale, 0, 255)) and 0 <= zp <= 255
    q = np.rint(v / scale) + zp
    assert q.min() >= 0 and q.max() <= 255  # the range covers every value: no saturation
    np.testing.assert_array_equal(quantize_dequantize(v), ((q - zp) * scale).astype(np.float32))
    assert len(np.unique(quantize_dequantize(v))) <= 256
    np.testing.assert_array_equal(quantize_dequantize(np.zeros(5, np.float32)), np.zeros(5))


@pytest.mark.parametrize("shape", [(5, 37), (5, 12, 64), (1, 3000)])
def test_rows_match_onnxruntime(rng, shape):
    pytest.importorskip("onnxruntime")
    x = awkward_rows(rng, shape)
    got = dynamic_quant_dequant(gp.from_numpy(x)).to_numpy()
    np.testing.assert_array_equal(got, onnxruntime_quant_dequant(x))


def test_lengths_limit_each_row_and_keep_the_padding(rng):
    pytest.importorskip("onnxruntime")
    x = awkward_rows(rng, (4, 9, 16))
    lengths = np.array([9, 4, 1, 0])
    x[1, 4:] = 1000.0  # padding far outside the valid range must not widen the scale
    got = dynamic_quant_dequant(gp.from_numpy(x), lengths=lengths).to_numpy()
    np.testing.assert_array_equal(got, onnxruntime_quant_dequant(x, lengths))
    np.testing.assert_array_equal(got[1, 4:], x[1, 4:])
    np.testing.assert_array_equal(got[3], x[3])
    on_device = gp.from_numpy(lengths.astype(np.int64))  # no upload (a CUDA graph's input)
    again = dynamic_quant_dequant(gp.from_numpy(x), lengths=on_device).to_numpy()
    np.testing.assert_array_equal(again, got)


def test_in_place(rng):
    x = awkward_rows(rng, (3, 50))
    a = gp.from_numpy(x)
    dynamic_quant_dequant(a, out=a)
    np.testing.assert_array_equal(a.to_numpy(), np.stack([quantize_dequantize(r) for r in x]))


def test_errors():
    x = gp.from_numpy(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match="float32"):
        dynamic_quant_dequant(gp.from_numpy(np.ones((2, 3), np.float16)))
    with pytest.raises(ValueError, match="2 integers"):
        dynamic_quant_dequant(x, lengths=[1, 2, 3])
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        dynamic_quant_dequant(x, lengths=[1, 4])
    with pytest.raises(ValueError, match="batch axis"):
        dynamic_quant_dequant(gp.from_numpy(np.float32(1.0).reshape(())))
    with pytest.raises(ValueError, match="2 dimensions"):
        dynamic_quant_dequant(gp.from_numpy(np.ones(4, np.float32)), lengths=[1, 2, 3, 4])
    with pytest.raises(ValueError, match="entries"):
        dynamic_quant_dequant(x, lengths=gp.from_numpy(np.ones(3, np.int64)))


def test_cuda_plan_launches_one_block_per_row(monkeypatch, rng):
    launches = []

    class Kernel:
        def launch(self, grid, block, args, shared_mem=0):
            launches.append((grid, block, args))

    monkeypatch.setattr(kl, "kernel", lambda file, func: Kernel())
    monkeypatch.setattr(kl, "constant", lambda file, name: 1024)
    x, y = gp.from_numpy(rng.standard_normal((3, 40), dtype=np.float32)), gp.empty((3, 40))
    plan = dynamic_quant._plan_cuda(3, 40, 8, 0)
    plan(x, y, None)
    lengths = gp.from_numpy(np.array([5, 2, 0], np.int64))
    plan(x, y, lengths)
    (grid, block, args), (_, _, args2) = launches
    assert grid == 3 and block == 1024 and args[3:] == (40, 8, 0) and args2[2] is lengths
    assert args2[5] == 1
