"""ops.dynamic_quant_dequant on the GPU: bit for bit onnxruntime's DynamicQuantizeLinear +
DequantizeLinear, at the sizes of a Kokoro utterance's activations and over padded rows."""

from __future__ import annotations

import numpy as np
import pytest
from dynamic_quant_reference import awkward_rows, onnxruntime_quant_dequant

import pygpukit as gp
from pygpukit.ops.dynamic_quant import dynamic_quant_dequant

pytestmark = pytest.mark.gpu
pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("shape", [(1, 31, 768), (5, 150, 640), (3, 1), (2, 33, 2048)])
def test_gpu_rows_match_onnxruntime(rng, shape):
    x = awkward_rows(rng, shape)
    got = dynamic_quant_dequant(gp.from_numpy(x)).to_numpy()
    np.testing.assert_array_equal(got, onnxruntime_quant_dequant(x))


def test_gpu_lengths_match_onnxruntime(rng):
    x = awkward_rows(rng, (4, 120, 512))
    lengths = np.array([120, 57, 1, 0])
    x[1, 57:] = -500.0
    got = dynamic_quant_dequant(gp.from_numpy(x), lengths=lengths).to_numpy()
    np.testing.assert_array_equal(got, onnxruntime_quant_dequant(x, lengths))
    a = gp.from_numpy(x)
    dynamic_quant_dequant(a, lengths=lengths, out=a)  # in place
    np.testing.assert_array_equal(a.to_numpy(), got)
