"""Mel filterbanks, mel spectrograms, MFCCs against librosa; Whisper's log-mel against a NumPy
transcription of openai-whisper's frontend."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops

# Reference libraries: test dependencies in CI; absent on the GPU machine, where the GPU
# paths are checked against NumPy by tests/ops/gpu/test_gpu_audio.py instead.
librosa = pytest.importorskip("librosa")


@pytest.mark.filterwarnings("ignore:Empty filters detected")
@pytest.mark.parametrize("htk", [False, True])
@pytest.mark.parametrize("norm", ["slaney", None])
@pytest.mark.parametrize(
    ("sr", "n_fft", "n_mels", "fmin", "fmax"),
    [
        (16000, 400, 80, 0.0, 8000.0),
        (16000, 400, 128, 0.0, None),
        (22050, 2048, 128, 30.0, 9000.0),
        (44100, 1024, 40, 100.0, None),
    ],
)
def test_mel_filterbank_matches_librosa(
    htk: bool, norm: str | None, sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None
) -> None:
    got = ops.mel_filterbank(sr, n_fft, n_mels, fmin, fmax, htk, norm).to_numpy()
    want = librosa.filters.mel(
        sr=sr,
        n_fft=n_fft,
        n_mels=n_mels,
        fmin=fmin,
        fmax=fmax,
        htk=htk,
        norm=norm,
        dtype=np.float64,
    )
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-6 * max(1.0, np.abs(want).max())


def whisper_frontend(audio: np.ndarray, n_mels: int) -> np.ndarray:
    """openai-whisper's log_mel_spectrogram, in NumPy float64 from librosa's pieces."""
    spec = librosa.stft(audio, n_fft=400, hop_length=160, window="hann", pad_mode="reflect")
    magnitudes = np.abs(spec[..., :-1]) ** 2
    filters = librosa.filters.mel(sr=16000, n_fft=400, n_mels=n_mels, dtype=np.float64)
    log_spec = np.log10(np.maximum(filters @ magnitudes, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_spectrogram_is_whispers(rng: np.random.Generator, n_mels: int) -> None:
    audio = (rng.standard_normal(16000 * 3) * 0.1).astype(np.float32)
    got = ops.log_mel_spectrogram(gp.from_numpy(audio), n_mels).to_numpy()
    want = whisper_frontend(audio.astype(np.float64), n_mels)
    assert got.shape == want.shape == (n_mels, 300)
    assert np.abs(got - want).max() < 1e-4


def test_log_mel_batch_uses_each_items_maximum(rng: np.random.Generator) -> None:
    quiet = (rng.standard_normal(8000) * 1e-3).astype(np.float32)
    loud = (rng.standard_normal(8000) * 10.0).astype(np.float32)
    got = ops.log_mel_spectrogram(gp.from_numpy(np.stack([quiet, loud]))).to_numpy()
    for row, audio in zip(got, (quiet, loud), strict=True):
        assert np.abs(row - whisper_frontend(audio.astype(np.float64), 80)).max() < 1e-4


def test_log_mel_padding_and_pad_or_trim(rng: np.random.Generator) -> None:
    audio = (rng.standard_normal(16000) * 0.1).astype(np.float32)
    x = gp.from_numpy(audio)
    padded = ops.log_mel_spectrogram(x, padding=4800).to_numpy()
    want = whisper_frontend(np.concatenate([audio, np.zeros(4800)]).astype(np.float64), 80)
    assert padded.shape == (80, 130) and np.abs(padded - want).max() < 1e-4
    full = ops.pad_or_trim(x)
    assert full.shape == (480000,)
    np.testing.assert_array_equal(full.to_numpy()[:16000], audio)
    assert not full.to_numpy()[16000:].any()
    assert ops.log_mel_spectrogram(full).shape == (80, 3000)
    long = gp.from_numpy(np.tile(audio, 31))
    np.testing.assert_array_equal(ops.pad_or_trim(long).to_numpy(), np.tile(audio, 31)[:480000])


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_mel_spectrogram_matches_librosa(rand: Callable[..., np.ndarray], power: float) -> None:
    x = rand((2, 11025))
    got = ops.mel_spectrogram(
        gp.from_numpy(x),
        sr=22050,
        n_fft=1024,
        hop_length=256,
        power=power,
        n_mels=64,
        pad_mode="constant",
        htk=True,
        norm=None,
    ).to_numpy()
    want = librosa.feature.melspectrogram(
        y=x.astype(np.float64),
        sr=22050,
        n_fft=1024,
        hop_length=256,
        power=power,
        n_mels=64,
        pad_mode="constant",
        htk=True,
        norm=None,
    )
    assert got.shape == want.shape
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5


def test_mfcc_matches_librosa(rand: Callable[..., np.ndarray]) -> None:
    x = rand((22050,))
    got = ops.mfcc(gp.from_numpy(x), sr=22050, n_mfcc=13, pad_mode="constant").to_numpy()
    want = librosa.feature.mfcc(y=x.astype(np.float64), sr=22050, n_mfcc=13)
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-3 * np.abs(want).max()


def test_mel_argument_errors(rand: Callable[..., np.ndarray]) -> None:
    with pytest.raises(ValueError, match="norm"):
        ops.mel_filterbank(16000, 400, 80, norm="l2")
    with pytest.raises(ValueError, match="fmin < fmax"):
        ops.mel_filterbank(16000, 400, 80, fmin=9000.0, fmax=8000.0)
    with pytest.raises(ValueError, match="sr"):
        ops.mel_filterbank(0, 400, 80)
    x = gp.from_numpy(rand((4000,)))
    with pytest.raises(ValueError, match="power"):
        ops.mel_spectrogram(x, sr=16000, n_fft=256, power=3.0)
    with pytest.raises(ValueError, match="n_mfcc"):
        ops.mfcc(x, sr=16000, n_fft=256, n_mfcc=50, n_mels=40)
    with pytest.raises(ValueError, match="reflect padding"):
        ops.log_mel_spectrogram(gp.from_numpy(rand((100,))))
