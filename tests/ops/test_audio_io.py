"""load_audio: formats soundfile writes, mixing down, resampling, and the typed errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import AudioFileError

# Reference libraries: test dependencies in CI; absent on the GPU machine, where the GPU
# paths are checked against NumPy by tests/ops/gpu/test_gpu_audio.py instead.
sf = pytest.importorskip("soundfile")


def stereo(rng: np.random.Generator, frames: int) -> np.ndarray:
    t = np.arange(frames) / 44100
    left = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.01 * rng.standard_normal(frames)
    right = 0.3 * np.sin(2 * np.pi * 660 * t + 1.0) + 0.01 * rng.standard_normal(frames)
    return np.stack([left, right], axis=1).astype(np.float32)


@pytest.mark.parametrize(
    ("fmt", "subtype", "tol"),
    [("WAV", "FLOAT", 0.0), ("WAV", "PCM_16", 4e-5), ("FLAC", "PCM_24", 1e-6)],
)
def test_load_audio_mixes_down_and_resamples(
    tmp_path: Path, rng: np.random.Generator, fmt: str, subtype: str, tol: float
) -> None:
    data = stereo(rng, 22050)
    path = tmp_path / f"clip.{fmt.lower()}"
    sf.write(path, data, 44100, format=fmt, subtype=subtype)
    native = ops.load_audio(path, sr=None, mono=False)
    assert native.shape == (2, 22050) and native.dtype == np.float32
    np.testing.assert_allclose(native.to_numpy(), data.T, atol=tol)
    mono = ops.load_audio(str(path), sr=None)
    np.testing.assert_allclose(mono.to_numpy(), data.mean(axis=1), atol=tol + 1e-7)
    at_16k = ops.load_audio(path)  # Whisper's rate by default
    assert at_16k.shape == (8000,)
    want = ops.resample(gp.from_numpy(data.mean(axis=1)), 44100, 16000).to_numpy()
    np.testing.assert_allclose(at_16k.to_numpy(), want, atol=tol + 1e-6)


def test_load_audio_ogg(tmp_path: Path, rng: np.random.Generator) -> None:
    data = stereo(rng, 44100)
    path = tmp_path / "clip.ogg"
    sf.write(path, data, 44100, format="OGG")
    got = ops.load_audio(path, sr=16000)
    assert got.shape == (16000,)
    # Lossy: the tones survive.
    spectrum = np.abs(np.fft.rfft(got.to_numpy()))
    assert {int(np.argmax(spectrum[:500])), int(np.argmax(spectrum[500:1000]) + 500)} == {440, 660}


def test_load_audio_errors(tmp_path: Path, rng: np.random.Generator) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        ops.load_audio(tmp_path / "missing.wav")
    with pytest.raises(AudioFileError, match="directory"):
        ops.load_audio(tmp_path)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(AudioFileError, match="empty") as info:
        ops.load_audio(empty)
    assert info.value.path == str(empty) and isinstance(info.value, ValueError)
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt " + rng.bytes(64))
    with pytest.raises(AudioFileError, match="cannot be decoded"):
        ops.load_audio(corrupt)
    text = tmp_path / "notes.flac"
    text.write_text("not audio at all\n" * 20)
    with pytest.raises(AudioFileError, match="cannot be decoded"):
        ops.load_audio(text)
    cut = tmp_path / "cut.wav"
    sf.write(cut, stereo(rng, 1000), 16000)
    cut.write_bytes(cut.read_bytes()[:30])  # the header cut short
    with pytest.raises(AudioFileError, match="cannot be decoded"):
        ops.load_audio(cut)
    silent = tmp_path / "no_frames.wav"
    sf.write(silent, np.zeros((0, 1), np.float32), 16000)
    with pytest.raises(AudioFileError, match="no samples"):
        ops.load_audio(silent)
    nan = tmp_path / "nan.wav"
    sf.write(nan, np.full((100, 1), np.nan, np.float32), 16000, subtype="FLOAT")
    with pytest.raises(AudioFileError, match="NaN"):
        ops.load_audio(nan)
