"""The real Kokoro int8 ONNX on the GPU machine: the longer comparisons with onnxruntime.

The CPU tests compare the audio of the short string; here every string (31, 151, 297
phonemes) and every voice is synthesized and its log-mel spectrogram compared with
onnxruntime's (with onnxruntime's alignment where a duration flipped), with the generator's
STFT/iSTFT on the CUDA backend's ``pygpukit.ops.audio`` kernels.
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


@pytest.mark.parametrize("key", ["short", "medium", "long"])
@pytest.mark.parametrize("voice", VOICES)
def test_gpu_log_mel_matches_onnxruntime(kokoro_model, reference, key, voice):
    ids = phonemes_to_ids(PHONEMES[key], kokoro_model.config.vocab)
    style = kokoro_model._style_table(voice)[len(ids) - 1, 0]
    tokens = as_token_array(ids)
    audio_ref, durations_ref = reference.audio_and_durations(tokens, style)
    audio = kokoro_model.synthesize(phonemes=PHONEMES[key], voice=voice)
    assert (audio.durations == durations_ref[1:-1]).mean() >= 0.95
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
