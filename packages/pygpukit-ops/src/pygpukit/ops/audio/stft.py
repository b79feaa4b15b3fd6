"""Short-time Fourier transform and its inverse, for any ``n_fft`` (a DFT as a matrix product).

Spectra are float32 GPUArrays (GPUArray has no complex dtype):

- ``output="complex"`` (the default): ``[..., n_fft // 2 + 1, n_frames, 2]``, real and
  imaginary parts on a trailing axis: the layout of ``torch.view_as_real(torch.stft(...))``
  (``spec[..., 0] + 1j * spec[..., 1]`` on the host is librosa's / torch's complex result);
- ``"magnitude"`` / ``"power"``: ``[..., n_bins, n_frames]``;
- ``"polar"``: a tuple ``(magnitude, phase)`` of two such arrays (phase in radians,
  ``atan2(imag, real)``), the form vocoders such as Kokoro's produce for :func:`istft`.

On the GPU, for ``n_fft`` up to 2048 whose prime factors are at most 64 (400, 512, 20, ...)
and for powers of two up to 4096, one fused kernel cuts, windows and FFTs the frames in shared
memory and writes the requested form (:mod:`._fft`; powers of two from 64 on have a kernel
unrolled for their size); other sizes take the DFT as a matrix product: a framing kernel, one fp32
matmul with a precomputed basis (window folded in, angles reduced exactly), one output kernel.
:func:`istft` inverts either way and overlap-adds, dividing by the summed squared window, so it
inverts :func:`stft` to float32
rounding for any window whose shifted squares do not vanish (every COLA window, e.g. Hann
with hop <= n_fft / 2). On the CPU backend NumPy's FFT computes in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from .. import _common as c
from .._plan import Launch, PlanCache, per_backend
from ..reference import stft as reference
from . import _fft
from . import _signal as sig

__all__ = ["istft", "stft"]

OUTPUTS = ("complex", "magnitude", "power", "polar")
_OUT_MODE = {"complex": 0, "magnitude": 1, "power": 2, "polar": 3}
PAD_MODES = ("reflect", "constant")


@dataclass(frozen=True, slots=True)
class Bases:
    """The device copies of one window's forward and inverse DFT bases."""

    window: GPUArray  # [n_fft]
    forward: GPUArray  # [2 * n_bins, n_fft]
    inverse: GPUArray  # [n_fft, 2 * n_bins]


def _build_bases(n_fft: int, window_bytes: bytes, device: int) -> Bases:
    win = np.frombuffer(window_bytes, dtype=np.float64)
    return Bases(
        sig.upload(win), sig.upload(reference.dft_basis(win)), sig.upload(reference.idft_basis(win))
    )


#: DFT bases by (n_fft, window bytes, device); built on the first use of a window.
BASES: PlanCache[Bases] = PlanCache("audio_dft_bases", _build_bases, maxsize=64)

#: Windows on the device by (window bytes, device), for the fused FFT kernels.
WINDOWS: PlanCache[GPUArray] = PlanCache(
    "audio_windows",
    lambda window_bytes, device: sig.upload(np.frombuffer(window_bytes, dtype=np.float64)),
    maxsize=64,
)


@dataclass(frozen=True, slots=True)
class Framing:
    """A checked STFT geometry (what every spectral op shares)."""

    n_fft: int
    hop: int
    win_length: int
    window: bytes  # the float64 window padded to n_fft
    center: bool
    pad_mode: str

    @property
    def n_bins(self) -> int:
        """Frequency bins of a one-sided spectrum: ``n_fft // 2 + 1``."""
        return self.n_fft // 2 + 1

    @property
    def window_values(self) -> np.ndarray:
        """The window (float64, padded to ``n_fft``) as an array."""
        return np.frombuffer(self.window, dtype=np.float64)

    def n_frames(self, length: int, op: str) -> int:
        """Frames of a signal of ``length`` samples; ``ValueError`` when it has too few."""
        pad = self.n_fft // 2 if self.center else 0
        if self.center and self.pad_mode == "reflect" and length <= pad:
            raise ValueError(
                f"{op}: reflect padding of {pad} samples needs a signal longer than that, got "
                f"{length} samples; use pad_mode='constant' or a longer signal"
            )
        if length + 2 * pad < self.n_fft:
            raise ValueError(
                f"{op}: a signal of {length} samples is shorter than n_fft = {self.n_fft}; "
                "use center=True or a smaller n_fft"
            )
        return reference.n_frames(length, self.n_fft, self.hop, self.center)


def make_framing(
    n_fft: Any,
    hop_length: Any,
    win_length: Any,
    window: Any,
    center: Any,
    pad_mode: Any,
    op: str,
) -> Framing:
    """Validate the STFT arguments shared by the spectral ops."""
    n_fft, hop, win = sig.framing(n_fft, hop_length, win_length, op)
    center = validation.boolean(center, "center", op)
    validation.choice(pad_mode, PAD_MODES, "pad_mode", op)
    _, key = sig.window_values(window, win, n_fft, op)
    return Framing(n_fft, hop, win, key, center, pad_mode)


def frames_launch(
    fr: Framing, batch: int, length: int, count: int
) -> tuple[Launch, tuple[int, ...]]:
    """The framing kernel of ``count`` frames of ``[batch, length]`` and its size arguments."""
    c.check_int32("stft", n_fft=fr.n_fft, hop=fr.hop)
    launch = sig.elementwise("audio", "audio_frames_f32", batch * count * fr.n_fft)
    pad = fr.n_fft // 2 if fr.center else 0
    reflect = int(fr.center and fr.pad_mode == "reflect")
    return launch, (batch, length, fr.n_fft, fr.hop, count, pad, reflect)


def frames_to_planar(
    x: GPUArray, fr: Framing, count: int, bases: Bases, launch: Launch, args: tuple[int, ...]
) -> GPUArray:
    """``[batch, 2 * n_bins, count]``: real parts then imaginary parts of each frame's DFT."""
    batch = x.shape[0]
    frames = gp.empty((batch, count, fr.n_fft), np.float32)
    launch(x, frames, *args)
    planar = gp.empty((batch, 2 * fr.n_bins, count), np.float32)
    gp.matmul(bases.forward, frames.swapaxes(1, 2), out=planar, allow_tf32=False)
    return planar


@dataclass(frozen=True, slots=True)
class CudaStft:
    """The GPU STFT of one shape: frames, one matmul, one output kernel."""

    fr: Framing
    count: int
    bases: Bases
    frames: Launch
    frame_args: tuple[int, ...]
    finish: Launch
    mode: int

    def __call__(self, x: GPUArray, a: GPUArray, b: GPUArray | None) -> None:
        planar = frames_to_planar(x, self.fr, self.count, self.bases, self.frames, self.frame_args)
        batch = x.shape[0]
        self.finish(
            planar, a, b if b is not None else a, batch, self.fr.n_bins, self.count, self.mode
        )


@dataclass(frozen=True, slots=True)
class CudaStftFft:
    """The fused GPU STFT of one shape: one kernel from samples to the requested form."""

    fr: Framing
    count: int
    window: GPUArray
    tables: _fft.FftTables
    launch: Launch
    frame_args: tuple[int, ...]  # batch, length, n_fft, hop, n_frames, pad, reflect
    mode: int

    def __call__(self, x: GPUArray, a: GPUArray, b: GPUArray | None) -> None:
        t = self.tables
        self.launch(
            x,
            self.window,
            t.twiddles,
            t.radices,
            a,
            b if b is not None else a,
            *self.frame_args,
            t.n_radices,
            t.pairs,
            self.mode,
        )


@dataclass(frozen=True, slots=True)
class CudaStftPow2:
    """The fused GPU STFT of a power-of-two ``n_fft``: one kernel unrolled for that size."""

    fr: Framing
    count: int
    window: GPUArray
    twiddles: GPUArray
    launch: Launch
    frame_args: tuple[int, ...]  # batch, length, n_fft, hop, n_frames, pad, reflect
    mode: int

    def __call__(self, x: GPUArray, a: GPUArray, b: GPUArray | None) -> None:
        batch, length, _, hop, n_frames, pad, reflect = self.frame_args
        self.launch(
            x,
            self.window,
            self.twiddles,
            a,
            b if b is not None else a,
            batch,
            length,
            hop,
            n_frames,
            pad,
            reflect,
            self.mode,
        )


def fused_stft(
    fr: Framing, batch: int, length: int, count: int, mode: int, device: int
) -> CudaStftFft | CudaStftPow2 | None:
    """The fused-kernel plan of ``count`` frames, or None when ``n_fft`` needs the matmul path."""
    if _fft.pow2_size(fr.n_fft):
        _, args = frames_launch(fr, batch, length, count)
        return CudaStftPow2(
            fr,
            count,
            WINDOWS.get(fr.window, device),
            _fft.POW2_TWIDDLES.get(fr.n_fft, device),
            _fft.pow2_launch(fr.n_fft, batch * count),
            args,
            mode,
        )
    return mixed_radix_stft(fr, batch, length, count, mode, device)


def mixed_radix_stft(
    fr: Framing, batch: int, length: int, count: int, mode: int, device: int
) -> CudaStftFft | None:
    """The generic fused kernel's plan (any ``n_fft`` with small prime factors), or None."""
    if _fft.radices(fr.n_fft) is None or not _fft.forward_fits(fr.n_fft):
        return None
    _, args = frames_launch(fr, batch, length, count)
    tables = _fft.TABLES.get(fr.n_fft, device)
    launch = _fft.launch("audio_stft_fft_f32", tables, batch * count)
    window = WINDOWS.get(fr.window, device)
    return CudaStftFft(fr, count, window, tables, launch, args, mode)


@dataclass(frozen=True, slots=True)
class ReferenceStft:
    """The CPU backend's STFT (NumPy float64 FFT)."""

    fr: Framing
    mode: int

    def __call__(self, x: GPUArray, a: GPUArray, b: GPUArray | None) -> None:
        fr = self.fr
        spec = reference.stft(c.f32(x), fr.n_fft, fr.hop, fr.window_values, fr.center, fr.pad_mode)
        if self.mode == 0:
            c.write_into(a, np.stack([spec.real, spec.imag], axis=-1))
        elif self.mode == 1:
            c.write_into(a, np.abs(spec))
        elif self.mode == 2:
            c.write_into(a, spec.real**2 + spec.imag**2)
        else:
            assert b is not None
            c.write_into(a, np.abs(spec))
            c.write_into(b, np.angle(spec))


def _plan_stft_cuda(
    fr: Framing, batch: int, length: int, mode: int, device: int
) -> CudaStft | CudaStftFft | CudaStftPow2:
    count = fr.n_frames(length, "stft")
    fused = fused_stft(fr, batch, length, count, mode, device)
    if fused is not None:
        return fused
    launch, args = frames_launch(fr, batch, length, count)
    finish = sig.elementwise("audio", "audio_spec_out_f32", batch * fr.n_bins * count)
    bases = BASES.get(fr.n_fft, fr.window, device)
    return CudaStft(fr, count, bases, launch, args, finish, mode)


def _plan_stft_numpy(fr: Framing, batch: int, length: int, mode: int, device: int) -> ReferenceStft:
    return ReferenceStft(fr, mode)


#: STFT plans by (framing, batch, length, output mode, device).
STFT_PLANS: PlanCache[CudaStft | CudaStftFft | CudaStftPow2 | ReferenceStft] = PlanCache(
    "stft", per_backend(cpu=_plan_stft_numpy, cuda=_plan_stft_cuda)
)


def stft(
    x: GPUArray,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: str | np.ndarray | GPUArray = "hann",
    center: bool = True,
    pad_mode: str = "reflect",
    return_complex: bool | None = None,
    *,
    output: str = "complex",
) -> GPUArray | tuple[GPUArray, GPUArray]:
    """The one-sided STFT of ``x`` ``[..., L]`` (float32; other float dtypes are converted).

    Same arguments and frame positions as ``torch.stft`` / ``librosa.stft`` (unnormalized):
    ``n_fft`` any size (powers of two or not); ``hop_length`` defaults to ``win_length // 4``;
    ``win_length`` (default ``n_fft``) is the window's length, zero-padded to ``n_fft`` in the
    middle; ``window`` ``"hann"`` / ``"hamming"`` (periodic) / ``"rectangular"`` or the
    ``win_length`` values; ``center`` pads ``n_fft // 2`` on both sides (``pad_mode``
    ``"reflect"``, which needs ``L > n_fft // 2``, or ``"constant"`` zeros), giving
    ``1 + L // hop`` frames for an even ``n_fft`` (``1 + (L + 2 (n_fft // 2) - n_fft) // hop``
    in general; ``1 + (L - n_fft) // hop`` without centring).

    ``output`` (see the module doc): ``"complex"`` ``[..., n_bins, n_frames, 2]``,
    ``"magnitude"``, ``"power"``, or ``"polar"`` for ``(magnitude, phase)``.
    ``return_complex=True`` is ``output="complex"``, ``False`` is ``output="polar"``.
    """
    op = "stft"
    if return_complex is not None:
        output = "complex" if validation.boolean(return_complex, "return_complex", op) else "polar"
    validation.choice(output, OUTPUTS, "output", op)
    fr = make_framing(n_fft, hop_length, win_length, window, center, pad_mode, op)
    x2, lead = sig.signal(x, "x", op)
    batch, length = x2.shape
    count = fr.n_frames(length, op)
    mode = _OUT_MODE[output]
    shape = (batch, fr.n_bins, count) + ((2,) if mode == 0 else ())
    a = gp.empty(shape, np.float32)
    b = gp.empty(shape, np.float32) if mode == 3 else None
    if batch and count:
        STFT_PLANS.get(fr, batch, length, mode, gp.get_device())(x2, a, b)
    a = a.reshape(*lead, *shape[1:])
    if b is not None:
        return a, b.reshape(*lead, *shape[1:])
    return a


@dataclass(frozen=True, slots=True)
class CudaIstft:
    """The GPU inverse STFT of one shape: to planar, one matmul, overlap-add."""

    fr: Framing
    count: int
    bases: Bases
    to_planar: Launch
    mode: int
    overlap_add: Launch
    start: int
    out_len: int

    def __call__(self, a: GPUArray, b: GPUArray | None, y: GPUArray) -> None:
        fr, count = self.fr, self.count
        batch = y.shape[0]
        planar = gp.empty((batch, 2 * fr.n_bins, count), np.float32)
        self.to_planar(a, b if b is not None else a, planar, batch, fr.n_bins, count, self.mode)
        frames_t = gp.empty((batch, fr.n_fft, count), np.float32)
        gp.matmul(self.bases.inverse, planar, out=frames_t, allow_tf32=False)
        self.overlap_add(
            frames_t,
            self.bases.window,
            y,
            batch,
            fr.n_fft,
            fr.hop,
            count,
            self.start,
            self.out_len,
            1,
            count,
        )


@dataclass(frozen=True, slots=True)
class CudaIstftFft:
    """The fused GPU inverse STFT of one shape: one kernel to windowed frames, overlap-add."""

    fr: Framing
    count: int
    window: GPUArray
    tables: _fft.FftTables
    inverse: Launch
    mode: int
    overlap_add: Launch
    start: int
    out_len: int

    def __call__(self, a: GPUArray, b: GPUArray | None, y: GPUArray) -> None:
        fr, count, t = self.fr, self.count, self.tables
        batch = y.shape[0]
        frames = gp.empty((batch, count, fr.n_fft), np.float32)
        self.inverse(
            a,
            b if b is not None else a,
            self.window,
            t.twiddles,
            t.radices,
            frames,
            batch,
            fr.n_fft,
            count,
            t.n_radices,
            t.pairs,
            self.mode,
        )
        self.overlap_add(
            frames,
            self.window,
            y,
            batch,
            fr.n_fft,
            fr.hop,
            count,
            self.start,
            self.out_len,
            fr.n_fft,
            1,
        )


@dataclass(frozen=True, slots=True)
class ReferenceIstft:
    """The CPU backend's inverse STFT (NumPy float64)."""

    fr: Framing
    mode: int
    out_len: int

    def __call__(self, a: GPUArray, b: GPUArray | None, y: GPUArray) -> None:
        fr = self.fr
        if self.mode == 0:
            z = c.f32(a).astype(np.float64)
            spec = z[..., 0] + 1j * z[..., 1]
        else:
            assert b is not None
            spec = c.f32(a).astype(np.float64) * np.exp(1j * c.f32(b).astype(np.float64))
        out = reference.istft(spec, fr.n_fft, fr.hop, fr.window_values, fr.center, self.out_len)
        c.write_into(y, out.reshape(y.shape))


def _plan_istft_cuda(
    fr: Framing, batch: int, count: int, mode: int, out_len: int, device: int
) -> CudaIstft | CudaIstftFft:
    c.check_int32("istft", n_fft=fr.n_fft, hop=fr.hop)
    start = fr.n_fft // 2 if fr.center else 0
    ola = sig.elementwise("audio", "audio_overlap_add_f32", batch * out_len)
    if _fft.radices(fr.n_fft) is not None:
        tables = _fft.TABLES.get(fr.n_fft, device)
        inverse = _fft.launch("audio_istft_fft_f32", tables, batch * count)
        window = WINDOWS.get(fr.window, device)
        return CudaIstftFft(fr, count, window, tables, inverse, mode, ola, start, out_len)
    to_planar = sig.elementwise("audio", "audio_spec_in_f32", batch * fr.n_bins * count)
    bases = BASES.get(fr.n_fft, fr.window, device)
    return CudaIstft(fr, count, bases, to_planar, mode, ola, start, out_len)


def _plan_istft_numpy(
    fr: Framing, batch: int, count: int, mode: int, out_len: int, device: int
) -> ReferenceIstft:
    return ReferenceIstft(fr, mode, out_len)


#: Inverse STFT plans by (framing, batch, frames, input mode, output length, device).
ISTFT_PLANS: PlanCache[CudaIstft | CudaIstftFft | ReferenceIstft] = PlanCache(
    "istft", per_backend(cpu=_plan_istft_numpy, cuda=_plan_istft_cuda)
)


def istft(
    spec: GPUArray,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: str | np.ndarray | GPUArray = "hann",
    center: bool = True,
    length: int | None = None,
    *,
    phase: GPUArray | None = None,
) -> GPUArray:
    """The signal ``[..., L]`` whose :func:`stft` (same arguments) is ``spec``.

    ``spec``: ``[..., n_fft // 2 + 1, n_frames, 2]`` (real, imaginary: ``stft``'s complex
    output), or, with ``phase`` given, a magnitude ``[..., n_bins, n_frames]`` and ``phase`` of
    the same shape in radians (``magnitude * exp(1j * phase)``, as a vocoder's
    ``torch.istft(mag * torch.exp(phase * 1j), ...)``). Windowed overlap-add divided by the
    summed squared window (``torch.istft`` / ``librosa.istft``); ``length`` trims or zero-pads
    the result, default ``hop * (n_frames - 1)`` with ``center`` (``n_fft + hop * (n_frames - 1)``
    without). float32 out; strided views (e.g. the halves of a vocoder's ``[B, 2 * n_bins, T]``
    output) and float16 / bfloat16 inputs are copied to contiguous float32 first.
    """
    op = "istft"
    fr = make_framing(n_fft, hop_length, win_length, window, center, "reflect", op)
    polar = phase is not None
    need = 3 if not polar else 2
    a = sig.spectrum(spec, "spec", op)
    if polar and a.ndim < need:
        raise ValueError(f"{op}: a magnitude must be [..., n_bins, n_frames], got {a.shape}")
    if not polar and (a.ndim < need or a.shape[-1] != 2):
        raise ValueError(
            f"{op}: spec must be [..., n_bins, n_frames, 2] (real, imaginary), got {a.shape}; "
            "pass phase= for a magnitude and phase"
        )
    core = a.shape[-3:-1] if not polar else a.shape[-2:]
    lead = tuple(a.shape[: a.ndim - need])
    if core[0] != fr.n_bins:
        raise ValueError(
            f"{op}: spec has {core[0]} frequency bins, n_fft = {fr.n_fft} needs {fr.n_bins}"
        )
    count = core[1]
    if count < 1:
        raise ValueError(f"{op}: spec has no frames")
    b = None
    if polar:
        b = sig.spectrum(phase, "phase", op)
        c.check_shape(b, "phase", tuple(a.shape))
    if length is None:
        out_len = fr.hop * (count - 1) + (0 if fr.center else fr.n_fft)
    else:
        out_len = validation.size(length, "length", op)
    batch = int(np.prod(lead)) if lead else 1
    y = gp.empty((batch, out_len), np.float32)
    if batch and out_len:
        mode = 1 if polar else 0
        plan = ISTFT_PLANS.get(fr, batch, count, mode, out_len, gp.get_device())
        plan(a, b, y)
    return y.reshape(*lead, out_len)
