"""Int8ActivationNetwork: the int8 ONNX graph's activation rounding at the right places (against
a NumPy reference network rounded at the same places), per utterance over its valid steps in a
padded batch."""

from __future__ import annotations

import numpy as np
import pytest
from kokoro_numpy_reference import ReferenceNetwork
from tts_files import write_tiny_checkpoint

from pygpukit import tts
from pygpukit.ops.reference.dynamic_quant import quantize_dequantize
from pygpukit.tts._masking import Lengths
from pygpukit.tts.int8_activations import Int8ActivationNetwork
from pygpukit.tts.kokoro import KokoroNetwork, _upload_ids, _upload_styles
from pygpukit.tts.random_model import TINY_CONFIG, random_state, random_voice


class RoundedReference(ReferenceNetwork):
    """The NumPy network with the graph's rounding: style projections, LSTM inputs, the
    duration projection's input (one utterance: each tensor is one row)."""

    def _linear(self, x: np.ndarray, prefix: str) -> np.ndarray:
        if prefix.endswith(".fc") or prefix == "predictor.duration_proj.linear_layer":
            x = quantize_dequantize(x).reshape(x.shape)
        return super()._linear(x, prefix)

    def _lstm(self, x: np.ndarray, prefix: str) -> np.ndarray:
        return super()._lstm(quantize_dequantize(x).reshape(x.shape), prefix)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _model(seed: int) -> tuple[dict, np.ndarray, np.ndarray]:
    state = random_state(TINY_CONFIG, seed=seed)
    style = random_voice(TINY_CONFIG, seed=seed + 1)[20, 0]
    ids = np.array([0, *np.random.default_rng(seed).integers(1, 170, 19), 0])
    return state, style, ids


def test_rounds_where_the_graph_rounds():
    state, style, ids = _model(int(np.random.default_rng().integers(1 << 20)))
    want_d, want = RoundedReference(TINY_CONFIG, state).predict_durations(ids, style, 1.0)
    d, durations = Int8ActivationNetwork(TINY_CONFIG, state).predict_durations(ids, style, 1.0)
    float_d, _ = KokoroNetwork(TINY_CONFIG, state).predict_durations(ids, style, 1.0)
    err, float_err = _rel(d.to_numpy(), want_d), _rel(float_d.to_numpy(), want_d)
    assert float_err > 1e-4  # the rounding is visible...
    assert err < 0.1 * float_err  # ...and it is the reference's (a rare 1-ulp flip aside)
    assert (durations == want).mean() >= 0.95


def test_each_utterance_of_a_batch_is_rounded_alone():
    state, style, ids = _model(int(np.random.default_rng().integers(1 << 20)))
    short = ids[:4].copy()
    short[-1] = 0
    net = Int8ActivationNetwork(TINY_CONFIG, state)
    width = len(ids)
    tokens = Lengths(np.array([width, len(short)]), width)
    d, durations, _ = net._prosody(
        _upload_ids([ids, short], width), _upload_styles([style, style]), tokens, 1.0
    )
    for i, alone_ids in enumerate((ids, short)):
        alone_d, alone = net.predict_durations(alone_ids, style, 1.0)
        n = len(alone_ids)
        # The padded steps (ALBERT's output there is not zero) must not widen any range.
        assert _rel(d.to_numpy()[i, :n], alone_d.to_numpy()[0]) < 1e-4
        assert (durations[i, :n] == alone).mean() >= 0.95


def test_load_refuses_it_for_a_float_model(tmp_path):
    write_tiny_checkpoint(tmp_path / "tiny")
    assert type(tts.load(tmp_path / "tiny").network) is KokoroNetwork
    with pytest.raises(ValueError, match="does not quantize its activations"):
        tts.load(tmp_path / "tiny", int8_activations=True)
