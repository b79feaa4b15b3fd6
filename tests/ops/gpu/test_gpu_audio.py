"""pygpukit.ops audio kernels on the GPU against the float64 NumPy path (and torch when present).

The CPU tests (test_audio_*.py) hold the NumPy path to librosa; here the framing, DFT-basis
matmul, output, overlap-add and log kernels are held to it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops.reference import mel as mel_ref
from pygpukit.ops.reference import stft as ref

pytestmark = pytest.mark.gpu

GEOMETRIES = [(400, 160, None), (20, 5, None), (512, 128, None), (31, 7, None), (2048, 512, 1600)]


def rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def complex_of(spec: gp.GPUArray) -> np.ndarray:
    z = spec.to_numpy().astype(np.float64)
    return z[..., 0] + 1j * z[..., 1]


@pytest.mark.parametrize(("n_fft", "hop", "win_length"), GEOMETRIES)
@pytest.mark.parametrize(
    ("center", "pad_mode"), [(True, "reflect"), (True, "constant"), (False, "reflect")]
)
@pytest.mark.parametrize("window", ["hann", "hamming"])
def test_stft_matches_numpy(
    rand: Callable[..., np.ndarray],
    n_fft: int,
    hop: int,
    win_length: int | None,
    center: bool,
    pad_mode: str,
    window: str,
) -> None:
    x = rand((3, 9000))
    win = ref.window(window, win_length or n_fft, n_fft)
    want = ref.stft(x.astype(np.float64), n_fft, hop, win, center, pad_mode)
    xg = gp.from_numpy(x)
    got = complex_of(ops.stft(xg, n_fft, hop, win_length, window, center, pad_mode))
    assert got.shape == want.shape and rel(got, want) < 1e-5
    mag = ops.stft(xg, n_fft, hop, win_length, window, center, pad_mode, output="magnitude")
    assert rel(mag.to_numpy(), np.abs(want)) < 1e-5
    power = ops.stft(xg, n_fft, hop, win_length, window, center, pad_mode, output="power")
    assert rel(power.to_numpy(), np.abs(want) ** 2) < 1e-5
    m, phase = ops.stft(xg, n_fft, hop, win_length, window, center, pad_mode, output="polar")
    assert rel(m.to_numpy() * np.exp(1j * phase.to_numpy()), want) < 1e-5


@pytest.mark.parametrize(("n_fft", "hop", "win_length"), GEOMETRIES)
@pytest.mark.parametrize("center", [True, False])
def test_istft_round_trip(
    rand: Callable[..., np.ndarray], n_fft: int, hop: int, win_length: int | None, center: bool
) -> None:
    length = 12000
    x = rand((2, 3, length))
    spec = ops.stft(gp.from_numpy(x), n_fft, hop, win_length, center=center)
    y = ops.istft(spec, n_fft, hop, win_length, center=center, length=length).to_numpy()
    keep = slice(None) if center else slice(n_fft, length - n_fft)
    assert rel(y[..., keep], x[..., keep]) < 1e-5


def test_istft_polar_matches_numpy(rng: np.random.Generator) -> None:
    """Kokoro's generator: n_fft 20, hop 5, a batch of magnitude/phase spectra."""
    mag = np.exp(rng.standard_normal((4, 11, 3000))).astype(np.float32)
    phase = np.sin(rng.standard_normal((4, 11, 3000))).astype(np.float32) * np.pi
    win = ref.window("hann", 20, 20)
    want = ref.istft(mag * np.exp(1j * phase.astype(np.float64)), 20, 5, win, True, None)
    got = ops.istft(gp.from_numpy(mag), 20, 5, phase=gp.from_numpy(phase)).to_numpy()
    assert got.shape == want.shape and rel(got, want) < 1e-5


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_matches_numpy(rng: np.random.Generator, n_mels: int) -> None:
    audio = (rng.standard_normal((2, 16000 * 7)) * 0.1).astype(np.float32)
    win = ref.window("hann", 400, 400)
    spec = ref.stft(audio.astype(np.float64), 400, 160, win, True, "reflect")[..., :-1]
    filters = mel_ref.mel_filterbank(16000, 400, n_mels, 0.0, 8000.0, False, "slaney")
    want = mel_ref.whisper_log_mel(np.abs(spec) ** 2, filters)
    got = ops.log_mel_spectrogram(gp.from_numpy(audio), n_mels).to_numpy()
    assert got.shape == want.shape == (2, n_mels, 700)
    assert np.abs(got - want).max() < 1e-4


def test_mfcc_and_mel_spectrogram_match_the_cpu_path(rng: np.random.Generator) -> None:
    audio = rng.standard_normal((2, 22050)).astype(np.float32)
    win = ref.window("hann", 2048, 2048)
    spec = ref.stft(audio.astype(np.float64), 2048, 512, win, True, "reflect")
    filters = mel_ref.mel_filterbank(22050, 2048, 128, 0.0, 11025.0, False, "slaney")
    mel = np.einsum("mk,bkf->bmf", filters, np.abs(spec) ** 2)
    got = ops.mel_spectrogram(gp.from_numpy(audio)).to_numpy()
    assert rel(got, mel) < 1e-5
    db = mel_ref.power_to_db(mel, 1e-10, 80.0)
    want = np.einsum("cm,bmf->bcf", mel_ref.dct_basis(20, 128), db)
    assert np.abs(ops.mfcc(gp.from_numpy(audio)).to_numpy() - want).max() < 1e-3


def test_stft_matches_torch(rand: Callable[..., np.ndarray]) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    x = rand((2, 48000))
    for n_fft, hop in ((400, 160), (20, 5), (1024, 256)):
        window = torch.hann_window(n_fft, dtype=torch.float64)
        want = torch.stft(
            torch.from_numpy(x.astype(np.float64)),
            n_fft,
            hop,
            window=window,
            center=True,
            pad_mode="reflect",
            return_complex=True,
        ).numpy()
        got = complex_of(ops.stft(gp.from_numpy(x), n_fft, hop))
        assert rel(got, want) < 1e-5
        back = torch.istft(
            torch.from_numpy(want), n_fft, hop, window=window, center=True, length=48000
        ).numpy()
        y = ops.istft(ops.stft(gp.from_numpy(x), n_fft, hop), n_fft, hop, length=48000)
        assert rel(y.to_numpy(), back) < 1e-5


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_equals_whisper_feature_extractor(n_mels: int) -> None:
    """The stored WhisperFeatureExtractor output (tools/audio_reference.py), on the GPU."""
    path = Path(__file__).resolve().parents[1] / "references" / "whisper_log_mel.npz"
    with np.load(path) as data:
        want = data[f"features_{n_mels}"]
        clips = [data["clip_a"], data["clip_b"]][: want.shape[0]]
    padded = [ops.pad_or_trim(gp.from_numpy(c.astype(np.float32) / 32768.0)) for c in clips]
    got = ops.log_mel_spectrogram(gp.stack(padded), n_mels).to_numpy()
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-4
