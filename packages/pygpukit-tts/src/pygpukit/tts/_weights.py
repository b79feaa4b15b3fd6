"""Kokoro's weights on the device, uploaded once at load, and the projections packed for speed.

Beyond the state dict itself (KModel's names, weight norm already folded), two packings cut
the number of launches per utterance:

- ALBERT's query, key and value projections are one ``[3 * hidden, hidden]`` matrix;
- the vocoder's tensors (``decoder.*``: the decoder's AdaIN blocks and the iSTFTNet generator)
  are stored in the vocoder's dtype (bfloat16 by default on the GPU, where the convolutions
  run on tensor cores), everything else in float32;
- every style projection (the ``fc`` of each AdaIN / AdaLayerNorm, about sixty small
  ``[2C, style]`` matrices) is stacked into one matrix per style half (the prosody predictor's
  and the decoder's), so one matmul per utterance gives every block's ``gamma`` and ``beta``
  as column ranges of its result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

__all__ = ["ALBERT_LAYER", "DeviceWeights", "StylePack", "is_vocoder"]

ALBERT_LAYER = "bert.encoder.albert_layer_groups.0.albert_layers.0."
_LSTM_NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


@dataclass(frozen=True)
class StylePack:
    """The stacked style projections of one style half: ``weight`` ``[N, style]``, ``bias``.

    ``columns[prefix]`` is ``(offset, channels)``: block ``prefix``'s ``gamma`` is columns
    ``offset : offset + channels`` of ``linear(style, weight, bias)``, ``beta`` the next
    ``channels``.
    """

    weight: GPUArray
    bias: GPUArray
    columns: dict[str, tuple[int, int]]


def _pack_styles(state: dict[str, np.ndarray], section: str) -> StylePack:
    prefixes = sorted(
        name[: -len(".fc.weight")]
        for name in state
        if name.startswith(section) and name.endswith(".fc.weight")
    )
    weights, biases, columns, offset = [], [], {}, 0
    for prefix in prefixes:
        w = state[prefix + ".fc.weight"]
        weights.append(w)
        biases.append(state.get(prefix + ".fc.bias", np.zeros(w.shape[0], np.float32)))
        columns[prefix] = (offset, w.shape[0] // 2)
        offset += w.shape[0]
    return StylePack(
        gp.from_numpy(np.ascontiguousarray(np.concatenate(weights), np.float32)),
        gp.from_numpy(np.ascontiguousarray(np.concatenate(biases), np.float32)),
        columns,
    )


def is_vocoder(name: str) -> bool:
    """Whether tensor ``name`` runs in the vocoder's dtype.

    The decoder and generator, except their style projections (packed, float32) and the sine
    source's merge (applied to the float32 source).
    """
    return name.startswith("decoder.") and ".fc." not in name and ".m_source." not in name


class DeviceWeights:
    """Every tensor of a Kokoro state dict as a GPUArray on the current device.

    float32, but the vocoder's tensors (:func:`is_vocoder`) in ``vocoder_dtype``.
    """

    def __init__(
        self,
        state: dict[str, np.ndarray],
        vocoder_dtype: np.dtype = gp.float32,
        query_scale: float = 1.0,
    ):
        self.vocoder_dtype = np.dtype(vocoder_dtype)
        self._arrays = {}
        for name, value in state.items():
            array = gp.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
            if is_vocoder(name) and self.vocoder_dtype != array.dtype:
                array = array.astype(self.vocoder_dtype)
            self._arrays[name] = array
        p = "bert.embeddings."
        # Position and token-type embeddings summed once: every token has type 0.
        token_type = state[p + "token_type_embeddings.weight"][0]
        positions = state[p + "position_embeddings.weight"] + token_type
        self.positions = gp.from_numpy(np.ascontiguousarray(positions, np.float32))
        a = ALBERT_LAYER + "attention."
        # The attention's 1/sqrt(head_dim) folded into the query projection (a power of two for
        # Kokoro's 64-wide heads: exact), so the scores need no scaling pass.
        scales = {"query": np.float32(query_scale), "key": np.float32(1), "value": np.float32(1)}
        self.qkv_weight = gp.from_numpy(
            np.ascontiguousarray(
                np.concatenate([state[a + n + ".weight"] * f for n, f in scales.items()]),
                np.float32,
            )
        )
        self.qkv_bias = gp.from_numpy(
            np.ascontiguousarray(
                np.concatenate([state[a + n + ".bias"] * f for n, f in scales.items()]),
                np.float32,
            )
        )
        self.styles = {
            "predictor": _pack_styles(state, "predictor."),
            "decoder": _pack_styles(state, "decoder."),
        }
        self._ones: dict[int, GPUArray] = {}

    def __getitem__(self, name: str) -> GPUArray:
        return self._arrays[name]

    def __contains__(self, name: str) -> bool:
        return name in self._arrays

    def get(self, name: str) -> GPUArray | None:
        """The tensor ``name``, or None where the checkpoint has none (an optional bias)."""
        return self._arrays.get(name)

    def ones(self, n: int) -> GPUArray:
        """``n`` ones (the weight of an affine-free LayerNorm)."""
        if n not in self._ones:
            self._ones[n] = gp.from_numpy(np.ones(n, np.float32))
        return self._ones[n]

    def lstm(self, prefix: str) -> tuple[tuple[GPUArray, ...], tuple[GPUArray, ...]]:
        """A bidirectional LSTM's ``(w_ih, w_hh, b_ih, b_hh)``, forward then reverse."""
        forward = tuple(self._arrays[f"{prefix}.{n}"] for n in _LSTM_NAMES)
        reverse = tuple(self._arrays[f"{prefix}.{n}_reverse"] for n in _LSTM_NAMES)
        return forward, reverse
