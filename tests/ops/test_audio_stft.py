"""pygpukit.ops.stft / istft against librosa and numpy.fft (float64), and their DFT bases.

On the CPU backend the ops run the NumPy path; the GPU tests (gpu/test_gpu_audio.py) hold the
kernels to the same references. The bases the GPU multiplies by are checked here against
``numpy.fft`` directly, so a wrong basis fails on every machine.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops.reference import stft as ref

# Reference libraries: test dependencies in CI; absent on the GPU machine, where the GPU
# paths are checked against NumPy by tests/ops/gpu/test_gpu_audio.py instead.
librosa = pytest.importorskip("librosa")

# (n_fft, hop, win_length): Whisper's, Kokoro's, powers of two, odd and prime sizes.
GEOMETRIES = [
    (400, 160, None),
    (20, 5, None),
    (512, 128, None),
    (31, 7, None),
    (67, 5, None),  # odd: the centred frames number 1 + (L - 1) // hop
    (256, 64, 200),
]


def complex_of(spec: gp.GPUArray) -> np.ndarray:
    z = spec.to_numpy().astype(np.float64)
    return z[..., 0] + 1j * z[..., 1]


def rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize(("n_fft", "hop", "win_length"), GEOMETRIES)
@pytest.mark.parametrize("window", ["hann", "hamming"])
@pytest.mark.parametrize(
    ("center", "pad_mode"), [(True, "reflect"), (True, "constant"), (False, "reflect")]
)
def test_stft_matches_librosa(
    rand: Callable[..., np.ndarray],
    n_fft: int,
    hop: int,
    win_length: int | None,
    window: str,
    center: bool,
    pad_mode: str,
) -> None:
    x = rand((3, 2000))
    got = complex_of(ops.stft(gp.from_numpy(x), n_fft, hop, win_length, window, center, pad_mode))
    want = librosa.stft(
        x.astype(np.float64),
        n_fft=n_fft,
        hop_length=hop,
        win_length=win_length,
        window=window,
        center=center,
        pad_mode=pad_mode,
    )
    assert got.shape == want.shape
    assert rel(got, want) < 1e-5  # float32 (the GPU runs these tests too)


def test_stft_custom_window_and_leading_axes(rand: Callable[..., np.ndarray]) -> None:
    x = rand((2, 3, 1500))
    win = np.abs(rand((300,))) + 0.1
    got = complex_of(ops.stft(gp.from_numpy(x), 320, 80, 300, win, pad_mode="constant"))
    want = librosa.stft(
        x.astype(np.float64),
        n_fft=320,
        hop_length=80,
        win_length=300,
        window=win,
        pad_mode="constant",
    )
    assert got.shape == (2, 3, 161, 1 + 1500 // 80) == want.shape
    assert rel(got, want) < 1e-5  # float32 (the GPU runs these tests too)


def test_stft_output_forms_agree(rand: Callable[..., np.ndarray]) -> None:
    x = gp.from_numpy(rand((2, 1200)))
    z = complex_of(ops.stft(x, 100, 25))
    mag = ops.stft(x, 100, 25, output="magnitude").to_numpy()
    power = ops.stft(x, 100, 25, output="power").to_numpy()
    m2, phase = ops.stft(x, 100, 25, return_complex=False)
    np.testing.assert_allclose(mag, np.abs(z), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(power, np.abs(z) ** 2, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(m2.to_numpy(), np.abs(z), rtol=1e-5, atol=1e-5)
    back = m2.to_numpy() * np.exp(1j * phase.to_numpy().astype(np.float64))
    assert rel(back, z) < 1e-5


@pytest.mark.parametrize(("n_fft", "hop", "win_length"), GEOMETRIES)
@pytest.mark.parametrize("center", [True, False])
def test_istft_inverts_stft(
    rand: Callable[..., np.ndarray], n_fft: int, hop: int, win_length: int | None, center: bool
) -> None:
    length = 3000
    x = rand((2, 2, length))  # two leading (batch) axes
    spec = ops.stft(gp.from_numpy(x), n_fft, hop, win_length, center=center)
    y = ops.istft(spec, n_fft, hop, win_length, center=center, length=length).to_numpy()
    # Without centring the first and last samples are under a zero of the window.
    keep = slice(None) if center else slice(n_fft, length - n_fft)
    assert rel(y[..., keep], x[..., keep]) < 1e-5


def test_istft_from_magnitude_and_phase_as_kokoro(rand: Callable[..., np.ndarray]) -> None:
    """Kokoro's vocoder: n_fft 20, hop 5, Hann, batched magnitude and phase."""
    x = rand((4, 24000))
    mag, phase = ops.stft(gp.from_numpy(x), 20, 5, output="polar")
    y = ops.istft(mag, 20, 5, phase=phase, length=24000)
    assert y.shape == (4, 24000) and rel(y.to_numpy(), x) < 1e-5


def test_istft_takes_the_halves_of_a_vocoder_output(rng: np.random.Generator) -> None:
    """Kokoro's conv_post output [B, 2 * n_bins, T]: exp of the first half, sin of the second."""
    out = gp.from_numpy(rng.standard_normal((2, 22, 50)).astype(np.float32))
    mag, phase = gp.exp(out[:, :11, :]), gp.sin(out[:, 11:, :])
    y = ops.istft(mag, 20, 5, phase=phase[:, :, :].astype(gp.bfloat16))
    host = out.to_numpy().astype(np.float64)
    ph = np.sin(host[:, 11:]).astype(np.float32).astype(gp.bfloat16).astype(np.float64)
    spec = np.exp(host[:, :11]) * np.exp(1j * ph)
    want = librosa.istft(spec, n_fft=20, hop_length=5)
    assert y.shape == want.shape and rel(y.to_numpy(), want) < 1e-5


def test_istft_matches_librosa_on_any_spectrum(rng: np.random.Generator) -> None:
    """Not every array is an STFT: the overlap-add of an arbitrary one is librosa's."""
    spec = rng.standard_normal((2, 65, 40)) + 1j * rng.standard_normal((2, 65, 40))
    packed = np.stack([spec.real, spec.imag], axis=-1).astype(np.float32)
    y = ops.istft(gp.from_numpy(packed), 128, 32).to_numpy()
    want = librosa.istft(spec.astype(np.complex64).astype(np.complex128), n_fft=128, hop_length=32)
    assert y.shape == want.shape and rel(y, want) < 1e-5


@pytest.mark.parametrize("n_fft", [20, 31, 400, 512])
def test_dft_bases_are_the_windowed_real_fft(rng: np.random.Generator, n_fft: int) -> None:
    win = ref.window("hann", n_fft, n_fft)
    frames = rng.standard_normal((7, n_fft))
    planar = frames @ ref.dft_basis(win).T
    bins = n_fft // 2 + 1
    want = np.fft.rfft(frames * win, axis=-1)
    np.testing.assert_allclose(planar[:, :bins] + 1j * planar[:, bins:], want, atol=1e-10)
    spec = rng.standard_normal((7, bins)) + 1j * rng.standard_normal((7, bins))
    back = np.concatenate([spec.real, spec.imag], axis=1) @ ref.idft_basis(win).T
    np.testing.assert_allclose(back, np.fft.irfft(spec, n=n_fft, axis=-1) * win, atol=1e-12)


def test_stft_argument_errors(rand: Callable[..., np.ndarray]) -> None:
    x = gp.from_numpy(rand((100,)))
    with pytest.raises(TypeError, match="GPUArray"):
        ops.stft(np.zeros(100, np.float32), 16)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="floating"):
        ops.stft(gp.from_numpy(np.arange(100, dtype=np.int32)), 16)
    with pytest.raises(ValueError, match="win_length"):
        ops.stft(x, 16, 4, 32)
    with pytest.raises(ValueError, match="window"):
        ops.stft(x, 16, 4, window="kaiser")
    with pytest.raises(ValueError, match="win_length = 16"):
        ops.stft(x, 16, 4, window=np.ones(8))
    with pytest.raises(ValueError, match="reflect padding"):
        ops.stft(x, 400, 100)
    with pytest.raises(ValueError, match="shorter than n_fft"):
        ops.stft(x, 400, 100, center=False)
    with pytest.raises(ValueError, match="output"):
        ops.stft(x, 16, output="db")
    spec = ops.stft(x, 16, 4)
    with pytest.raises(ValueError, match="frequency bins"):
        ops.istft(spec, 32, 4)
    with pytest.raises(ValueError, match="real, imaginary"):
        ops.istft(ops.stft(x, 16, 4, output="magnitude"), 16, 4)
    with pytest.raises(ValueError, match="phase must have shape"):
        mag = ops.stft(x, 16, 4, output="magnitude")
        ops.istft(mag, 16, 4, phase=gp.from_numpy(np.ones((9, 25), np.float32)))


def test_stft_converts_half_precision_and_views(rand: Callable[..., np.ndarray]) -> None:
    x = rand((2, 900))
    want = complex_of(ops.stft(gp.from_numpy(x[:, ::2].copy()), 64, 16))
    got = complex_of(ops.stft(gp.from_numpy(x)[:, ::2], 64, 16))
    np.testing.assert_allclose(got, want, atol=1e-5)
    half = complex_of(ops.stft(gp.from_numpy(x.astype(np.float16)), 64, 16))
    exact = librosa.stft(
        x.astype(np.float16).astype(np.float64), n_fft=64, hop_length=16, pad_mode="reflect"
    )
    assert rel(half, exact) < 1e-5


def test_fused_fft_radix_plans() -> None:
    """Which sizes the fused GPU kernel takes, and its radix plans (their product is n_fft)."""
    from pygpukit.ops.audio import _fft

    assert _fft.radices(400) == [4, 4, 5, 5]
    assert _fft.radices(20) == [4, 5]
    assert _fft.radices(512) == [4, 4, 4, 4, 2]
    assert _fft.radices(31) == [31]
    assert _fft.radices(1) == []
    assert _fft.radices(134) is None  # 67 is above the generic radix bound
    assert _fft.radices(4096) is None  # above the shared-memory bound
    for n in range(1, 2049):
        plan = _fft.radices(n)
        if plan is not None:
            assert int(np.prod(plan, dtype=np.int64)) == n and all(r <= 64 for r in plan)
