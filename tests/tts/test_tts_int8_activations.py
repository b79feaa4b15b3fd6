"""Int8ActivationNetwork: the int8 ONNX graph's activation rounding at the right places (against
a NumPy reference network rounded at the same places), per utterance over its valid steps in a
padded batch."""

from __future__ import annotations

import numpy as np
import pytest
from kokoro_numpy_reference import ReferenceNetwork
from tts_files import write_tiny_checkpoint

import pygpukit as gp
from pygpukit import tts
from pygpukit.ops.reference.dynamic_quant import quantize_dequantize
from pygpukit.tts._masking import Lengths
from pygpukit.tts.int8_activations import Int8ActivationNetwork
from pygpukit.tts.kokoro import KokoroNetwork, _upload_ids, _upload_styles, frame_counts
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
    """Each rounded stage alone, on the same input: the device's and the reference's rounding
    are both onnxruntime's bit for bit, so only float rounding parts them (chained, a 1-ulp
    difference could move a value across a rounding boundary and spread)."""
    state, style, ids = _model(int(np.random.default_rng().integers(1 << 20)))
    ref = RoundedReference(TINY_CONFIG, state)
    nets = Int8ActivationNetwork(TINY_CONFIG, state), KokoroNetwork(TINY_CONFIG, state)
    s_pro = style.reshape(1, -1)[:, TINY_CONFIG.style_dim :]
    d = ref.duration_encoder(ref._linear(ref.albert(ids[None]), "bert_encoder"), s_pro)
    x = ref._lstm(d, "predictor.lstm")
    width = len(ids)
    tokens = Lengths(np.array([width]), width)
    errors = []
    for net in nets:
        lstm = net._lstm(gp.from_numpy(d), "predictor.lstm", tokens).to_numpy()
        proj = "predictor.duration_proj.linear_layer"
        logits = net._linear(gp.from_numpy(x), proj).to_numpy()
        gamma, _ = net.styles(_upload_styles([style]))("predictor.text_encoder.lstms.1")
        want_gamma = ref._linear(s_pro, "predictor.text_encoder.lstms.1.fc")[:, : gamma.shape[1]]
        errors.append([_rel(lstm, x), _rel(logits, ref._linear(x, proj)),
                       _rel(gamma.to_numpy(), want_gamma)])  # fmt: skip
    for rounded, plain in zip(*errors, strict=True):
        assert plain > 1e-4  # the rounding is visible...
        assert rounded < 1e-5  # ...and it is the reference's


@pytest.mark.parametrize("on_device", [False, True])  # True: lengths as a CUDA graph holds them
def test_each_utterance_of_a_batch_is_rounded_alone(on_device):
    state, style, ids = _model(int(np.random.default_rng().integers(1 << 20)))
    short = ids[:4].copy()
    short[-1] = 0
    net = Int8ActivationNetwork(TINY_CONFIG, state)
    width = len(ids)
    valid = np.array([width, len(short)])
    tokens = Lengths(valid, width, device=gp.from_numpy(valid) if on_device else None)
    out = net.phoneme_half(_upload_ids([ids, short], width), _upload_styles([style, style]), tokens)
    d, durations = out.features, frame_counts(out.duration.to_numpy(), tokens.lengths, 1.0)
    for i, alone_ids in enumerate((ids, short)):
        alone_d, alone = net.predict_durations(alone_ids, style, 1.0)
        n = len(alone_ids)
        # The padded steps (ALBERT's output there is not zero) must not widen any range: a
        # widened one moves every rounded value (1e-2 and more where it shows). The batched
        # float products may differ from the lone ones by an ulp, which now and then moves a
        # value across a rounding boundary, and the LSTMs carry that on (5 runs in 1400 went
        # past 1e-4, the worst to 1.3e-3); the rounding over the valid steps alone is checked
        # exactly below.
        assert _rel(d.to_numpy()[i, :n], alone_d.to_numpy()[0]) < 3e-3
        assert (durations[i, :n] == alone).mean() >= 0.95


@pytest.mark.parametrize("on_device", [False, True])
def test_lstm_inputs_are_rounded_over_their_valid_steps_only(on_device):
    """A padded utterance's LSTM input gets the range of its valid steps, whatever its padded
    steps hold (here values far outside it), and a full-width one beside it keeps its own:
    each equals the utterance run alone. The same input bits in both runs, so the same
    rounding: only the float LSTM's batched products differ."""
    rng = np.random.default_rng()
    state, style, ids = _model(int(rng.integers(1 << 20)))
    ref = RoundedReference(TINY_CONFIG, state)
    s_pro = style.reshape(1, -1)[:, TINY_CONFIG.style_dim :]
    x = ref.duration_encoder(ref._linear(ref.albert(ids[None]), "bert_encoder"), s_pro)[0]
    x = x.astype(np.float32)
    width, n = x.shape[0], int(rng.integers(2, x.shape[0] - 2))
    padded = x.copy()
    padded[n:] = rng.standard_normal((width - n, x.shape[1])) * 50 * np.abs(x).max()
    net, prefix = Int8ActivationNetwork(TINY_CONFIG, state), "predictor.lstm"

    def lstm(batch: np.ndarray, valid: list[int]) -> np.ndarray:
        lengths = np.array(valid)
        device = gp.from_numpy(lengths) if on_device else None
        tokens = Lengths(lengths, batch.shape[1], device=device)
        return net._lstm(gp.from_numpy(np.ascontiguousarray(batch)), prefix, tokens).to_numpy()

    both = lstm(np.stack([x, padded]), [width, n])
    assert _rel(both[0], lstm(x[None], [width])[0]) < 1e-5
    assert _rel(both[1, :n], lstm(x[None, :n], [n])[0]) < 1e-5


def test_load_refuses_it_for_a_float_model(tmp_path):
    write_tiny_checkpoint(tmp_path / "tiny")
    assert type(tts.load(tmp_path / "tiny").network) is KokoroNetwork
    with pytest.raises(ValueError, match="does not quantize its activations"):
        tts.load(tmp_path / "tiny", int8_activations=True)
