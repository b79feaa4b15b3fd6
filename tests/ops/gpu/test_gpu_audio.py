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

# The generic fused FFT kernel takes n_fft <= 2048 with prime factors <= 64 (400 = 4*4*5*5, 20,
# the prime 31, 48); powers of two from 64 to 4096 have kernels of their own (64 with 128 frames
# a block, so blocks straddle batch items; 128, 256 and 2048 with shorter windows); 134
# (= 2 * 67) takes the DFT-as-matmul path.
GEOMETRIES = [
    (400, 160, None),
    (20, 5, None),
    (31, 7, None),
    (48, 12, None),
    (64, 16, None),
    (128, 50, 100),
    (256, 64, 200),
    (512, 128, None),
    (1024, 256, None),
    (2048, 512, 1600),
    (4096, 1024, None),
    (134, 32, None),
]


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
    for n_fft, hop in ((400, 160), (20, 5), (1024, 256), (2048, 512)):
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


@pytest.mark.parametrize(
    ("orig", "target"), [(44100, 16000), (16000, 44100), (48000, 44100), (22050, 16000)]
)
def test_resample_matches_numpy(rng: np.random.Generator, orig: int, target: int) -> None:
    from pygpukit.ops.reference import resample as res_ref

    x = rng.standard_normal((3, orig)).astype(np.float32)
    up, down = res_ref.ratio(orig, target)
    filters, half = res_ref.design(up, down)
    want = res_ref.resample(x.astype(np.float64), up, down, filters, half)
    got = ops.resample(gp.from_numpy(x), orig, target).to_numpy()
    assert got.shape == want.shape and rel(got, want) < 1e-5


def test_pitch_matches_numpy(rng: np.random.Generator) -> None:
    from pygpukit.ops.reference import pitch as pitch_ref

    sr = 22050
    t = np.arange(2 * sr) / sr
    tone = 0.5 * np.sin(2 * np.pi * 233.0 * t) + 0.2 * np.sin(2 * np.pi * 466.0 * t)
    x = np.stack([tone + 0.01 * rng.standard_normal(t.size), rng.standard_normal(t.size)])
    x = x.astype(np.float32)
    f0, voiced = ops.pitch(gp.from_numpy(x), sr, 65.0, 2093.0)
    frames = ref.frame(x.astype(np.float64), 2048, 512, True, "constant")
    want_f0, want_voiced = pitch_ref.yin(frames, sr, sr // 2093, 340, 0.1)
    got_f0, got_voiced = f0.to_numpy(), voiced.to_numpy()
    assert got_f0.shape == want_f0.shape
    inner = slice(2, -2)
    assert np.all(np.abs(got_f0[0, inner] / want_f0[0, inner] - 1) < 1e-3)
    assert np.all(np.abs(got_f0[0, inner] / 233.0 - 1) < 0.01)
    assert got_voiced[0, inner].all() and got_voiced[1].mean() < 0.1
    # Noise: the same global-minimum periods in nearly every frame (float32 vs float64 ties).
    assert np.mean(np.abs(got_f0[1] / want_f0[1] - 1) < 1e-3) > 0.9
    assert np.mean(got_voiced == want_voiced) > 0.95


def test_onset_strength_matches_numpy(rng: np.random.Generator) -> None:
    from pygpukit.ops.reference import onset as onset_ref

    sr = 22050
    x = (0.001 * rng.standard_normal(3 * sr)).astype(np.float32)
    for start in (0.3, 1.1, 2.0):
        i = int(start * sr)
        x[i : i + 2000] += rng.standard_normal(2000).astype(np.float32) * np.exp(
            -np.arange(2000) / 300
        )
    spec = ref.stft(
        x.astype(np.float64), 2048, 512, ref.window("hann", 2048, 2048), True, "constant"
    )
    mel = mel_ref.mel_filterbank(sr, 2048, 128, 0.0, sr / 2, False, "slaney") @ np.abs(spec) ** 2
    want = onset_ref.onset_strength(mel_ref.power_to_db(mel, 1e-10, 80.0), 1, 3)
    got = ops.onset_strength(gp.from_numpy(x), sr).to_numpy()
    assert np.abs(got - want).max() < 1e-3 * want.max()
    peaks = ops.onset_detect(gp.from_numpy(x), sr, units="time")
    assert all(np.abs(peaks - s).min() < 0.05 for s in (0.3, 1.1, 2.0))


def test_load_audio_resamples_on_the_gpu(tmp_path: Path, rng: np.random.Generator) -> None:
    sf = pytest.importorskip("soundfile")
    data = (0.2 * rng.standard_normal((44100, 2))).astype(np.float32)
    path = tmp_path / "clip.wav"
    sf.write(path, data, 44100, subtype="FLOAT")
    got = ops.load_audio(path).to_numpy()
    from pygpukit.ops.reference import resample as res_ref

    up, down = res_ref.ratio(44100, 16000)
    filters, half = res_ref.design(up, down)
    want = res_ref.resample(data.mean(axis=1).astype(np.float64), up, down, filters, half)
    assert got.shape == (16000,) and rel(got, want) < 1e-5
