"""Resampling against soxr and ideal interpolation, YIN against librosa's yin, onsets against
librosa's onset_strength / onset_detect (the NumPy path; gpu/test_gpu_audio.py runs the same
checks on the kernels)."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops

# Reference libraries: test dependencies in CI; absent on the GPU machine, where the GPU
# paths are checked against NumPy by tests/ops/gpu/test_gpu_audio.py instead.
librosa = pytest.importorskip("librosa")
soxr = pytest.importorskip("soxr")

RATES = [
    (44100, 16000),
    (16000, 44100),
    (48000, 44100),
    (22050, 24000),
    (48000, 16000),
    (8000, 16000),
]


def tones(rng: np.random.Generator, sr: int, seconds: float, fmax: float, count: int = 8):
    """A random sum of sines below ``fmax`` and a function giving it at any times."""
    freqs = rng.uniform(20.0, fmax, count)
    phases = rng.uniform(0.0, 2 * np.pi, count)

    def at(t: np.ndarray) -> np.ndarray:
        return np.sin(2 * np.pi * freqs[:, None] * t[None] + phases[:, None]).sum(0) / 4

    return at(np.arange(int(sr * seconds)) / sr), at


def rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize(("orig", "target"), RATES)
def test_resample_matches_soxr_and_ideal_interpolation(
    rng: np.random.Generator, orig: int, target: int
) -> None:
    """Documented tolerance: content below 0.85 of the lower Nyquist; soxr HQ within 1e-3 away
    from the ends and 2e-3 over the whole signal (the ends are padded differently: a random
    draw reached 1.07e-3 there), ideal band-limited interpolation within 1e-5 away from the ends."""
    x, at = tones(rng, orig, 1.0, 0.85 * min(orig, target) / 2)
    got = ops.resample(gp.from_numpy(np.stack([x, x[::-1]]).astype(np.float32)), orig, target)
    got = got.to_numpy().astype(np.float64)
    assert got.shape == (2, -(-x.size * target // orig))
    want = soxr.resample(x, orig, target, quality="HQ")
    assert want.shape[0] == got.shape[1]
    middle = slice(target // 10, -target // 10)
    assert rel(got[0, middle], want[middle]) < 1e-3
    assert rel(got[0], want) < 2e-3
    want_reversed = soxr.resample(x[::-1].copy(), orig, target, quality="HQ")
    assert rel(got[1, middle], want_reversed[middle]) < 1e-3
    assert rel(got[1], want_reversed) < 2e-3
    ideal = at(np.arange(got.shape[1]) / target)
    assert rel(got[0, middle], ideal[middle]) < 1e-5  # float32 input, sums and output


def test_resample_same_rate_and_errors(rng: np.random.Generator) -> None:
    x = gp.from_numpy(rng.standard_normal(1000).astype(np.float32))
    np.testing.assert_array_equal(ops.resample(x, 16000, 16000.0).to_numpy(), x.to_numpy())
    with pytest.raises(TypeError):
        ops.resample(x, 16000.5, 8000)
    with pytest.raises(ValueError, match="orig_sr"):
        ops.resample(x, 0, 8000)
    with pytest.raises(ValueError, match="simpler ratio"):
        ops.resample(x, 1_000_003, 999_983)


@pytest.mark.parametrize("f0", [98.0, 220.0, 441.3, 1000.0, 1700.0])
def test_pitch_matches_librosa_yin_on_tones(rng: np.random.Generator, f0: float) -> None:
    sr = 22050
    t = np.arange(sr) / sr
    phase = rng.uniform(0, 2 * np.pi)
    x = 0.5 * np.sin(2 * np.pi * f0 * t + phase) + 0.2 * np.sin(4 * np.pi * f0 * t)
    x = (x + 0.01 * rng.standard_normal(sr)).astype(np.float32)
    f, voiced = ops.pitch(gp.from_numpy(x), sr, 65.0, 2093.0)
    f, voiced = f.to_numpy(), voiced.to_numpy()
    want = librosa.yin(x, fmin=65.0, fmax=2093.0, sr=sr)
    assert f.shape == voiced.shape == want.shape and voiced.dtype == np.bool_
    inner = slice(2, -2)  # the padded end frames
    assert np.all(np.abs(f[inner] / want[inner] - 1) < 0.01)
    assert np.all(np.abs(f[inner] / f0 - 1) < 0.01)
    assert voiced[inner].all()


def test_pitch_voicing_on_noise_and_a_batch(rng: np.random.Generator) -> None:
    sr = 16000
    noise = rng.standard_normal(sr).astype(np.float32)
    tone = np.sin(2 * np.pi * 300.0 * np.arange(sr) / sr).astype(np.float32)
    f, voiced = ops.pitch(gp.from_numpy(np.stack([noise, tone])), sr, 80.0, 1000.0, 1024)
    assert f.shape == (2, 1 + sr // 256)
    v = voiced.to_numpy()
    assert v[0].mean() < 0.1 and v[1, 2:-2].all()
    want = librosa.yin(noise, fmin=80.0, fmax=1000.0, sr=sr, frame_length=1024)
    np.testing.assert_allclose(f.to_numpy()[0], want, rtol=1e-3)


def test_pitch_argument_errors(rng: np.random.Generator) -> None:
    x = gp.from_numpy(rng.standard_normal(4000).astype(np.float32))
    with pytest.raises(ValueError, match="fmin < fmax"):
        ops.pitch(x, 16000, 500.0, 200.0)
    with pytest.raises(ValueError, match="too short"):
        ops.pitch(x, 16000, 20.0, 400.0, frame_length=512)
    with pytest.raises(ValueError, match="threshold"):
        ops.pitch(x, 16000, threshold=1.5)


def clicks(rng: np.random.Generator, sr: int, times: list[float], seconds: float) -> np.ndarray:
    x = 0.001 * rng.standard_normal(int(sr * seconds))
    decay = np.exp(-np.arange(2000) / 300.0)
    for s in times:
        i = int(s * sr)
        x[i : i + 2000] += rng.standard_normal(2000) * decay
    return x.astype(np.float32)


def test_onset_strength_and_detect_match_librosa(rng: np.random.Generator) -> None:
    sr = 22050
    times = [0.31, 0.87, 1.52, 2.2]
    x = clicks(rng, sr, times, 3.0)
    env = ops.onset_strength(gp.from_numpy(x), sr).to_numpy()
    want = librosa.onset.onset_strength(y=x, sr=sr)
    assert env.shape == want.shape
    assert np.abs(env - want).max() < 1e-4 * want.max()
    frames = ops.onset_detect(gp.from_numpy(x), sr)
    np.testing.assert_array_equal(frames, librosa.onset.onset_detect(y=x, sr=sr))
    seconds = ops.onset_detect(gp.from_numpy(x), sr, units="time")
    # Every click is found within 50 ms (a noisy tail may add a weaker onset, as in librosa).
    assert all(np.abs(seconds - t).min() < 0.05 for t in times)


def test_onset_strength_batched_and_errors(rng: np.random.Generator) -> None:
    sr = 16000
    x = np.stack([clicks(rng, sr, [0.2, 0.6], 1.0), clicks(rng, sr, [0.4], 1.0)])
    env = ops.onset_strength(gp.from_numpy(x), sr, n_fft=1024, hop_length=256, lag=2).to_numpy()
    for row, signal in zip(env, x, strict=True):
        want = librosa.onset.onset_strength(y=signal, sr=sr, n_fft=1024, hop_length=256, lag=2)
        assert np.abs(row - want).max() < 1e-4 * want.max()
    with pytest.raises(ValueError, match="1-D"):
        ops.onset_detect(gp.from_numpy(x), sr)
    silence = ops.onset_detect(gp.from_numpy(np.zeros(sr, np.float32)), sr)
    assert silence.shape == (0,)


def test_benchmark_suite_smoke() -> None:
    """The ops_audio suite's cases run and pass their checks on this backend."""
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.harness import HarnessConfig, measure
    from pygpukit.benchmark.peers import PyGPUkitLibrary
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.ops.benchmarks import audio as suite

    rng = np.random.default_rng()
    ctx = SuiteContext(PyGPUkitLibrary.backend_name(gp), True, DataCache(rng), rng, sizes=[1])
    cfg = HarnessConfig(max_reps=2, min_reps=1, budget_s=0.05, warmup_s=0.0, target_rep_ms=0.1)
    lib = PyGPUkitLibrary()
    results = [measure(case, lib, cfg) for case in suite.SUITE.cases(ctx)]
    assert [r.status for r in results] == ["ok"] * 4, [r.reason for r in results]
