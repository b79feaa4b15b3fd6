"""Kokoro with the int8 ONNX graph's dynamic activation rounding emulated after ALBERT.

kokoro-onnx's ``kokoro-v1.0.int8.onnx`` rounds every activation that enters a quantized product
to 8 bits with its own per-tensor scale and zero point (``DynamicQuantizeLinear`` before
``MatMulInteger`` / ``ConvInteger``, and ``DynamicQuantizeLSTM``). :class:`Int8ActivationNetwork`
applies the same rounding (:func:`pygpukit.ops.dynamic_quant.dynamic_quant_dequant`, bit for bit
onnxruntime's) where the prosody path after ALBERT meets it: both style halves before their
AdaIN / AdaLayerNorm projections, the input of every BiLSTM (duration encoder, duration LSTM, the
F0/energy LSTM, the text encoder's) and the duration projection's input. Each utterance of a
batch is rounded over its own valid steps, as onnxruntime runs it alone.

What it does not reproduce, and why it is not the default:

- ALBERT (12 applications of one quantized layer) is chaotic under this rounding: a change of one
  float32 ulp in a product moves a few values across a rounding boundary, and the flips grow
  layer by layer. Measured on the real file: the emulated ALBERT in float64 and in float32
  products differ by 10-11 % (relative L2) at its output, more than the float model differs from
  onnxruntime's (8-9 %). Only a bit-exact copy of onnxruntime's CPU kernels (its LayerNorm,
  softmax, GELU and sgemm summation orders) would track it, so ALBERT stays float.
- The LSTMs' recurrent state, which onnxruntime also rounds at every step (inside the sequence
  kernel).

Fed onnxruntime's own ALBERT output, the emulated duration path gives onnxruntime's frame counts
for 99.98 % of the tokens of the 15 test cases (float: 99.1 %); end to end, ALBERT's difference
dominates and the emulation does not raise the agreement (97.2 % vs 97.3 %). See docs/tts.md
and ``tools/tts_onnx_durations.py``.
"""

from __future__ import annotations

import numpy as np

from pygpukit.array import GPUArray
from pygpukit.ops.dynamic_quant import dynamic_quant_dequant
from pygpukit.ops.linear import linear

from ._masking import Lengths
from .kokoro import KokoroNetwork, _Styles

__all__ = ["QUANTIZED_INPUTS", "Int8ActivationNetwork"]

#: Linear layers whose input the emulation rounds (ALBERT's are left float: see the module doc).
QUANTIZED_INPUTS = frozenset({"predictor.duration_proj.linear_layer"})


class Int8ActivationNetwork(KokoroNetwork):
    """:class:`~pygpukit.tts.kokoro.KokoroNetwork` with the int8 graph's activation rounding.

    Applied after ALBERT: the style projections, every BiLSTM's input, the duration projection.
    """

    def styles(self, ref: GPUArray) -> _Styles:
        """The style projections of ``ref``, each style half rounded as the int8 graph does."""
        s = self.config.style_dim
        # The graph rounds each style half once, before all of that half's projections.
        halves = [dynamic_quant_dequant(ref[:, :s].contiguous()),
                  dynamic_quant_dequant(ref[:, s:].contiguous())]  # fmt: skip
        projected, columns = {}, {}
        for section, half in zip(("decoder", "predictor"), halves, strict=True):
            pack = self.weights.styles[section]
            projected[section] = linear(half, pack.weight, pack.bias)
            columns.update(pack.columns)
        if self.vocoder_dtype != np.float32:
            projected["decoder"] = projected["decoder"].astype(self.vocoder_dtype)
        return _Styles(projected, columns)

    def _lstm(self, x: GPUArray, prefix: str, lengths: Lengths) -> GPUArray:
        return super()._lstm(dynamic_quant_dequant(x, lengths=lengths.for_lstm()), prefix, lengths)

    def _linear(self, x: GPUArray, prefix: str, activation: str | None = None) -> GPUArray:
        if prefix in QUANTIZED_INPUTS:
            x = dynamic_quant_dequant(x)  # padded steps hold LSTM zeros: the range is unchanged
        return super()._linear(x, prefix, activation)
