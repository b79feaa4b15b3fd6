"""Bad input to ``transcribe``: each a typed error saying what to do, or a documented empty
result (silence), never a crash. (Bad model directories: test_asr_loading.py.)"""

from __future__ import annotations

import numpy as np
import pytest
from asr_clips import DATA, speech

import pygpukit as gp
from pygpukit import asr


@pytest.fixture(scope="module")
def tiny_en(tiny_en_dir):
    return asr.load(tiny_en_dir, dtype="float32" if gp.backend_name() == "cpu" else "float16")


def test_missing_file(tiny_en, tmp_path):
    pytest.importorskip("soundfile")  # reading a file needs it; without it the error says so
    with pytest.raises(asr.AudioError, match="no such audio file"):
        tiny_en.transcribe(tmp_path / "absent.wav")


def test_corrupt_file(tiny_en, tmp_path, rng):
    pytest.importorskip("soundfile")  # reading a file needs it; without it the error says so
    bad = tmp_path / "noise.wav"
    bad.write_bytes(b"RIFF" + rng.bytes(2000))
    with pytest.raises(asr.AudioError, match="cannot decode audio"):
        tiny_en.transcribe(bad)


def test_empty_file(tiny_en, tmp_path):
    (tmp_path / "empty.flac").write_bytes(b"")
    with pytest.raises(asr.AudioError):
        tiny_en.transcribe(tmp_path / "empty.flac")


def test_empty_array(tiny_en):
    with pytest.raises(asr.AudioError, match="no samples"):
        tiny_en.transcribe(np.zeros(0, np.float32))


@pytest.mark.parametrize("bad", [np.ones(100, np.complex64), np.ones(100, bool), np.array(["a"])])
def test_wrong_dtype(tiny_en, bad):
    with pytest.raises(asr.AudioError, match="dtype"):
        tiny_en.transcribe(bad)


def test_wrong_rank(tiny_en, rng):
    stereo = rng.standard_normal((16000, 2)).astype(np.float32)
    with pytest.raises(asr.AudioError, match="mono"):
        tiny_en.transcribe(stereo)


def test_other_sample_rates_are_resampled_and_bad_ones_refused(tiny_en, rng):
    from pygpukit.asr.whisper.audio import as_waveform

    audio = (0.1 * rng.standard_normal(8000)).astype(np.float32)
    assert as_waveform(audio, 8000).shape == (16000,)
    for rate in (0, -16000, 16000.0, True):
        with pytest.raises(asr.AudioError, match="sample_rate"):
            tiny_en.transcribe(audio, sample_rate=rate)


def test_nan_samples(tiny_en):
    audio = speech("fox")
    audio[1000] = np.nan
    with pytest.raises(asr.AudioError, match="NaN"):
        tiny_en.transcribe(audio)


def test_unknown_language(tiny_en):
    with pytest.raises(asr.UnsupportedModelError, match="English-only"):
        tiny_en.transcribe(speech("fox"), language="klingon")


def test_translate_on_english_only_model(tiny_en):
    with pytest.raises(asr.UnsupportedModelError, match="translate"):
        tiny_en.transcribe(speech("fox"), task="translate")


@pytest.mark.parametrize(
    "kwargs",
    [{"task": "summarize"}, {"beam_size": 0}, {"batch_size": 1.5}, {"temperature": -0.5},
     {"temperature": ()}, {"without_timestamps": "yes"}, {"word_timestamps": 1},
     {"max_new_tokens": 0}, {"max_new_tokens": 1000}],
)  # fmt: skip
def test_bad_options(tiny_en, kwargs):
    with pytest.raises((ValueError, TypeError)):
        tiny_en.transcribe(speech("fox"), **kwargs)


def test_silence_gives_an_empty_result(tiny_en):
    result = tiny_en.transcribe(np.zeros(16000 * 3, np.float32))
    assert result.text.strip() == "" and result.segments == []


def test_noise_does_not_crash_or_loop(tiny_en, rng):
    noise = (0.05 * rng.standard_normal(16000 * 3)).astype(np.float32)
    result = tiny_en.transcribe(noise, temperature=(0.0, 0.6))
    for seg in result.segments:
        assert 0 <= seg.start < seg.end <= 3.0 + 1e-6
        assert seg.compression_ratio < 2.4 or seg.temperature > 0


def test_int16_and_gpuarray_inputs_are_accepted(tiny_en):
    pcm = np.load(DATA / "fox.npy")
    from pygpukit.asr.whisper.audio import as_waveform

    as_float = as_waveform(pcm)
    assert as_float.dtype == np.float32 and np.array_equal(as_float, pcm / np.float32(32768))
    result = tiny_en.transcribe(gp.from_numpy(as_float), without_timestamps=True)
    assert "fox" in result.text.lower()
