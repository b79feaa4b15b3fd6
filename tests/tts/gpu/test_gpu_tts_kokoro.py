"""The real Kokoro int8 ONNX on the GPU machine against onnxruntime (CPU provider).

The acceptance of the CPU tests, on the CUDA backend: for every string (31, 151, 297 phonemes)
and every voice, the predicted frames per phoneme equal onnxruntime's for at least 95 % of the
tokens with the total within 1 %, and the log-mel spectrogram correlates at least 0.95 with
onnxruntime's (with onnxruntime's alignment where a duration flipped), with the generator's
STFT/iSTFT on the CUDA backend's ``pygpukit.ops.audio`` kernels. Also a padded batch of every
voice: each utterance's durations are the ones it gets alone. And the duration path alone on
onnxruntime's own ALBERT output, the same 95 % and 1 % in every case.
"""

from __future__ import annotations

import numpy as np
import pytest
from tts_reference import PHONEMES, OnnxReference, log_mel_correlation

from pygpukit.tts.text import as_token_array, phonemes_to_ids

pytestmark = pytest.mark.gpu
pytest.importorskip("onnxruntime")
VOICES = ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]


@pytest.fixture(scope="module")
def reference(kokoro_onnx_path):
    return OnnxReference(kokoro_onnx_path)


# The CPU backend measured jf_nezumi on the medium string 1.07 % off onnxruntime's total (the
# int8 graph quantizes every activation, this float implementation does not). The GPU's float32
# prosody half rounds differently, so the case may pass or miss here: not strict.
_NEAR_MISS = pytest.mark.xfail(
    strict=False, reason="CPU: total 1.07 % off onnxruntime's int8 activations (555 vs 561)"
)


@pytest.mark.parametrize(
    ("voice", "key"),
    [
        pytest.param(v, k, marks=_NEAR_MISS) if (v, k) == ("jf_nezumi", "medium") else (v, k)
        for k in ("short", "medium", "long")
        for v in VOICES
    ],
)
def test_gpu_durations_match_onnxruntime(kokoro_model, reference, key, voice):
    ids = as_token_array(phonemes_to_ids(PHONEMES[key], kokoro_model.config.vocab))
    style = kokoro_model._style_table(voice)[len(ids) - 1, 0]
    _, ours = kokoro_model.network.predict_durations(ids, style, 1.0)
    theirs = reference.durations(ids, style)
    assert ours.shape == theirs.shape
    assert (ours == theirs).mean() >= 0.95, (ours, theirs)
    assert abs(int(ours.sum()) - int(theirs.sum())) <= 0.01 * theirs.sum()


@pytest.mark.parametrize("key", ["short", "medium", "long"])
@pytest.mark.parametrize("voice", VOICES)
def test_gpu_duration_path_matches_onnxruntime_given_its_albert(
    kokoro_model, reference, key, voice
):
    """The duration path alone (duration encoder, LSTM, projection, rounding) on onnxruntime's
    own ``bert_encoder`` output: ALBERT's 8-bit activation rounding makes its output move with
    any float32 ulp upstream (onnxruntime against itself with every ALBERT LayerNorm moved by
    one ulp: 93.9-100 % of the tokens equal, ``tools/tts_onnx_sensitivity.py``), so this is the
    comparison that measures this implementation rather than that rounding."""
    ids = as_token_array(phonemes_to_ids(PHONEMES[key], kokoro_model.config.vocab))
    style = kokoro_model._style_table(voice)[len(ids) - 1, 0]
    features = reference.bert_features(ids)
    _, ours = kokoro_model.network.predict_durations(ids, style, 1.0, bert_features=features)
    theirs = reference.durations(ids, style)
    assert (ours == theirs).mean() >= 0.95, (ours, theirs)
    assert abs(int(ours.sum()) - int(theirs.sum())) <= 0.01 * theirs.sum()


def test_gpu_batch_durations_equal_single(kokoro_model):
    """Five voices, three lengths, one padded batch: each utterance as it is alone.

    The batch's GEMMs may add in another order than one utterance's, so a duration near a
    rounding boundary may flip; where none did, the audio must be the same up to rounding.
    """
    texts = [PHONEMES[k] for k in ("short", "medium", "long", "medium", "short")]
    batch = kokoro_model.synthesize_batch(phonemes=texts, voice=VOICES)
    for text, voice, got in zip(texts, VOICES, batch, strict=True):
        alone = kokoro_model.synthesize(phonemes=text, voice=voice)
        assert (got.durations == alone.durations).mean() >= 0.95
        if np.array_equal(got.durations, alone.durations):
            assert len(got.samples) == len(alone.samples)
            assert log_mel_correlation(got.samples, alone.samples) >= 0.99


@pytest.mark.parametrize("key", ["short", "medium", "long"])
@pytest.mark.parametrize("voice", VOICES)
def test_gpu_log_mel_matches_onnxruntime(kokoro_model, reference, key, voice):
    ids = phonemes_to_ids(PHONEMES[key], kokoro_model.config.vocab)
    style = kokoro_model._style_table(voice)[len(ids) - 1, 0]
    tokens = as_token_array(ids)
    audio_ref, durations_ref = reference.audio_and_durations(tokens, style)
    audio = kokoro_model.synthesize(phonemes=PHONEMES[key], voice=voice)
    # The durations are test_gpu_durations_match_onnxruntime's subject; this one is the audio's,
    # on onnxruntime's alignment wherever a frame count differs.
    if np.array_equal(audio.durations, durations_ref[1:-1]):
        samples = audio.samples
    else:
        samples = kokoro_model.network(tokens, style, 1.0, durations=durations_ref).audio
    assert len(samples) == len(audio_ref)
    assert log_mel_correlation(samples, audio_ref) >= 0.95


def test_gpu_seeded_noise_is_reproducible(kokoro_model):
    a = kokoro_model.synthesize(phonemes=PHONEMES["short"], voice="jf_alpha", seed=3)
    b = kokoro_model.synthesize(phonemes=PHONEMES["short"], voice="jf_alpha", seed=3)
    np.testing.assert_array_equal(a.samples, b.samples)
