"""Mel filterbanks, mel spectrograms, Whisper's log-mel frontend and MFCCs.

- :func:`mel_filterbank`: librosa's ``filters.mel`` (Slaney or HTK scale, Slaney area
  normalisation or none) as a float32 GPUArray ``[n_mels, n_fft // 2 + 1]``;
- :func:`mel_spectrogram`: ``filterbank @ |stft|**power``, ``[..., n_mels, n_frames]``;
- :func:`log_mel_spectrogram`: exactly Whisper's frontend (openai-whisper's
  ``log_mel_spectrogram`` and transformers' ``WhisperFeatureExtractor``): 16 kHz, n_fft 400,
  hop 160, periodic Hann, reflect-padded centred frames, the last frame dropped, Slaney mels
  0-8 kHz, ``log10(max(mel, 1e-10))``, clamped to (max - 8) per batch item, ``(x + 4) / 4``;
- :func:`pad_or_trim`: zero-pad or cut the last axis to 30 s (480 000 samples), which is what
  ``WhisperFeatureExtractor`` does before the frontend (``log_mel_spectrogram(pad_or_trim(a))``
  is its ``input_features``, 3000 frames);
- :func:`mfcc`: librosa's ``feature.mfcc``: DCT-II (orthonormal) of the mel power in decibels.

On the GPU the power spectrum is one fused FFT kernel (n_fft 400); the mel projection is an fp32
matmul, then the per-item maximum and one kernel for the log scaling.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from .. import _common as c
from .._plan import Launch, PlanCache, per_backend
from ..reference import mel as reference
from ..reference import stft as stft_reference
from . import _signal as sig
from .stft import (
    BASES,
    Bases,
    CudaStftFft,
    CudaStftPow2,
    Framing,
    frames_launch,
    frames_to_planar,
    fused_stft,
    make_framing,
    stft,
)

__all__ = [
    "log_mel_spectrogram",
    "mel_filterbank",
    "mel_spectrogram",
    "mfcc",
    "pad_or_trim",
    "power_to_db",
]

#: Whisper's audio constants: 16 kHz, 400-sample windows every 160 samples, 30 s windows.
WHISPER_SAMPLE_RATE = 16000
WHISPER_N_FFT = 400
WHISPER_HOP = 160
WHISPER_N_SAMPLES = 30 * WHISPER_SAMPLE_RATE
MEL_NORMS = ("slaney", None)


def _filter_values(
    sr: Any, n_fft: Any, n_mels: Any, fmin: Any, fmax: Any, htk: Any, norm: Any, op: str
) -> np.ndarray:
    sr_f = float(sr)
    if not sr_f > 0:
        raise ValueError(f"{op}: sr must be a positive sample rate, got {sr!r}")
    n_fft = validation.size(n_fft, "n_fft", op, minimum=1)
    n_mels = validation.size(n_mels, "n_mels", op, minimum=1)
    hi = sr_f / 2.0 if fmax is None else float(fmax)
    lo = float(fmin)
    if not 0.0 <= lo < hi:
        raise ValueError(f"{op}: need 0 <= fmin < fmax, got fmin={fmin!r}, fmax={fmax!r}")
    htk = validation.boolean(htk, "htk", op)
    if norm not in MEL_NORMS:
        raise ValueError(f"{op}: norm must be 'slaney' or None, got {norm!r}")
    return reference.mel_filterbank(sr_f, n_fft, n_mels, lo, hi, htk, norm)


def mel_filterbank(
    sr: float,
    n_fft: int,
    n_mels: int = 128,
    fmin: float = 0.0,
    fmax: float | None = None,
    htk: bool = False,
    norm: str | None = "slaney",
    dtype: Any = np.float32,
) -> GPUArray:
    """Triangular mel filters ``[n_mels, n_fft // 2 + 1]``, as ``librosa.filters.mel``.

    ``fmax`` defaults to ``sr / 2``; ``htk`` picks HTK's mel scale instead of Slaney's;
    ``norm="slaney"`` gives each filter unit area, ``None`` peak 1. Computed in float64 on the
    host and stored as ``dtype`` (float32 or float64).
    """
    values = _filter_values(sr, n_fft, n_mels, fmin, fmax, htk, norm, "mel_filterbank")
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"mel_filterbank: dtype must be float32 or float64, got {dt}")
    return gp.from_numpy(values.astype(dt))


@dataclass(frozen=True, slots=True)
class MelBank:
    """A filterbank on the device: as given, and duplicated for [real; imag] squares."""

    filters: GPUArray  # [n_mels, n_bins]
    doubled: GPUArray  # [n_mels, 2 * n_bins]


def _build_bank(values_bytes: bytes, n_mels: int, device: int) -> MelBank:
    values = np.frombuffer(values_bytes, dtype=np.float64).reshape(n_mels, -1)
    return MelBank(sig.upload(values), sig.upload(np.concatenate([values, values], axis=1)))


#: Filterbanks on the device by (float64 bytes, n_mels, device).
BANKS: PlanCache[MelBank] = PlanCache("audio_mel_banks", _build_bank, maxsize=64)


def _mel_power(
    x: GPUArray,
    fr: Framing,
    count: int,
    bank: MelBank,
    bases: Bases,
    launch: Launch,
    args: tuple[int, ...],
) -> GPUArray:
    """``bank @ |stft|**2`` of the first ``count`` frames: ``[batch, n_mels, count]``."""
    planar = frames_to_planar(x, fr, count, bases, launch, args)
    gp.multiply(planar, planar, out=planar)
    return gp.matmul(bank.doubled, planar, allow_tf32=False)


@dataclass(frozen=True, slots=True)
class CudaLogMel:
    """Whisper's frontend on the GPU for one shape."""

    fr: Framing
    count: int
    bases: Bases
    bank: MelBank
    frames: Launch
    frame_args: tuple[int, ...]
    finish: Launch

    def __call__(self, x: GPUArray) -> GPUArray:
        mel = _mel_power(
            x, self.fr, self.count, self.bank, self.bases, self.frames, self.frame_args
        )
        batch, n_mels, count = mel.shape
        maxes = mel.reshape(batch, n_mels * count).max(axis=1)
        self.finish(mel, maxes, batch, n_mels * count, 1.0, 1e-10, 8.0, 0.25, 1.0)
        return mel


@dataclass(frozen=True, slots=True)
class CudaLogMelFft:
    """Whisper's frontend on the GPU with the fused FFT kernel writing the power spectrum."""

    power: CudaStftFft | CudaStftPow2
    bank: MelBank
    finish: Launch

    def __call__(self, x: GPUArray) -> GPUArray:
        fr, count = self.power.fr, self.power.count
        batch = x.shape[0]
        power = gp.empty((batch, fr.n_bins, count), np.float32)
        self.power(x, power, None)
        mel = gp.matmul(self.bank.filters, power, allow_tf32=False)
        n_mels = mel.shape[1]
        maxes = mel.reshape(batch, n_mels * count).max(axis=1)
        self.finish(mel, maxes, batch, n_mels * count, 1.0, 1e-10, 8.0, 0.25, 1.0)
        return mel


@dataclass(frozen=True, slots=True)
class ReferenceLogMel:
    """The CPU backend's Whisper frontend (NumPy float64)."""

    fr: Framing
    count: int
    filters: bytes
    n_mels: int

    def __call__(self, x: GPUArray) -> GPUArray:
        fr = self.fr
        spec = stft_reference.stft(c.f32(x), fr.n_fft, fr.hop, fr.window_values, True, "reflect")
        power = spec.real**2 + spec.imag**2
        filters = np.frombuffer(self.filters, dtype=np.float64).reshape(self.n_mels, -1)
        return c.to_array(reference.whisper_log_mel(power[..., : self.count], filters), np.float32)


def _plan_log_mel_cuda(
    fr: Framing, filters: bytes, n_mels: int, batch: int, length: int, device: int
) -> CudaLogMel | CudaLogMelFft:
    count = fr.n_frames(length, "log_mel_spectrogram") - 1
    finish = sig.elementwise("audio", "audio_log_finish_f32", batch * n_mels * count)
    power = fused_stft(fr, batch, length, count, 2, device)  # Whisper's n_fft 400 = 4*4*5*5
    if power is not None:
        return CudaLogMelFft(power, BANKS.get(filters, n_mels, device), finish)
    launch, args = frames_launch(fr, batch, length, count)
    return CudaLogMel(
        fr,
        count,
        BASES.get(fr.n_fft, fr.window, device),
        BANKS.get(filters, n_mels, device),
        launch,
        args,
        finish,
    )


def _plan_log_mel_numpy(
    fr: Framing, filters: bytes, n_mels: int, batch: int, length: int, device: int
) -> ReferenceLogMel:
    return ReferenceLogMel(fr, fr.n_frames(length, "log_mel_spectrogram") - 1, filters, n_mels)


#: Whisper frontend plans by (framing, filterbank bytes, n_mels, batch, length, device).
LOG_MEL_PLANS: PlanCache[CudaLogMel | CudaLogMelFft | ReferenceLogMel] = PlanCache(
    "log_mel_spectrogram", per_backend(cpu=_plan_log_mel_numpy, cuda=_plan_log_mel_cuda)
)

_WHISPER_FRAMING: dict[int, Framing] = {}


@functools.lru_cache(maxsize=8)
def _whisper_filters(n_mels: int) -> bytes:
    """Whisper's filterbank (librosa's Slaney mels, 0-8 kHz) as float64 bytes, made once."""
    return reference.mel_filterbank(
        WHISPER_SAMPLE_RATE, WHISPER_N_FFT, n_mels, 0.0, WHISPER_SAMPLE_RATE / 2, False, "slaney"
    ).tobytes()


def pad_or_trim(audio: GPUArray, length: int = WHISPER_N_SAMPLES) -> GPUArray:
    """``audio`` ``[..., L]`` cut or zero-padded at the end to ``length`` samples.

    The default is 30 s at 16 kHz, as openai-whisper's ``pad_or_trim`` and
    ``WhisperFeatureExtractor`` do.
    """
    x, lead = sig.signal(audio, "audio", "pad_or_trim")
    length = validation.size(length, "length", "pad_or_trim")
    batch, have = x.shape
    if have >= length:
        return x[:, :length].copy().reshape(*lead, length)
    out = gp.zeros((batch, length), np.float32)
    if have:
        out[:, :have] = x
    return out.reshape(*lead, length)


def log_mel_spectrogram(audio: GPUArray, n_mels: int = 80, *, padding: int = 0) -> GPUArray:
    """Whisper's log-mel features of 16 kHz ``audio`` ``[..., L]``: ``[..., n_mels, L // 160]``.

    ``n_mels`` 80 (Whisper up to large-v2) or 128 (large-v3). ``padding`` zeros are appended
    first (openai-whisper's argument: its ``transcribe`` passes 30 s of them and slices 3000-frame
    windows). No padding to 30 s happens here: ``log_mel_spectrogram(pad_or_trim(audio))`` is
    what ``WhisperFeatureExtractor`` returns. The clamp to (max - 8) uses each batch item's own
    maximum, as transformers does for a batch. float32 out.
    """
    op = "log_mel_spectrogram"
    n_mels = validation.size(n_mels, "n_mels", op, minimum=1)
    padding = validation.size(padding, "padding", op)
    x, lead = sig.signal(audio, "audio", op)
    if padding:
        x = pad_or_trim(x, x.shape[1] + padding)
    batch, length = x.shape
    fr = _WHISPER_FRAMING.get(0)
    if fr is None:
        fr = make_framing(WHISPER_N_FFT, WHISPER_HOP, None, "hann", True, "reflect", op)
        _WHISPER_FRAMING[0] = fr
    filters = _whisper_filters(n_mels)
    count = fr.n_frames(length, op) - 1
    if batch == 0 or count == 0:
        return gp.empty((*lead, n_mels, count), np.float32)
    plan = LOG_MEL_PLANS.get(fr, filters, n_mels, batch, length, gp.get_device())
    return plan(x).reshape(*lead, n_mels, count)


def mel_spectrogram(
    x: GPUArray,
    sr: float = 22050,
    n_fft: int = 2048,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: str | np.ndarray | GPUArray = "hann",
    center: bool = True,
    pad_mode: str = "reflect",
    power: float = 2.0,
    n_mels: int = 128,
    fmin: float = 0.0,
    fmax: float | None = None,
    htk: bool = False,
    norm: str | None = "slaney",
) -> GPUArray:
    """``mel_filterbank(...) @ |stft(x)|**power``: ``[..., n_mels, n_frames]`` (float32).

    The arguments of :func:`stft` and :func:`mel_filterbank` (librosa's
    ``feature.melspectrogram``; note that librosa's default ``pad_mode`` is ``"constant"``,
    this one's ``"reflect"`` as torch's). ``power`` 1 (magnitude) or 2 (power).
    """
    op = "mel_spectrogram"
    if power not in (1, 2, 1.0, 2.0):
        raise ValueError(f"{op}: power must be 1.0 (magnitude) or 2.0 (power), got {power!r}")
    values = _filter_values(sr, n_fft, n_mels, fmin, fmax, htk, norm, op)
    spec = stft(
        x,
        n_fft,
        hop_length,
        win_length,
        window,
        center,
        pad_mode,
        output="power" if float(power) == 2.0 else "magnitude",
    )
    assert isinstance(spec, GPUArray)
    bank = BANKS.get(values.tobytes(), values.shape[0], gp.get_device())
    return gp.matmul(bank.filters, spec, allow_tf32=False)


def _db_launch(total: int) -> Launch | None:
    return None if total == 0 else sig.elementwise("audio", "audio_log_finish_f32", total)


@dataclass(frozen=True, slots=True)
class CudaDb:
    """``power_to_db`` in place on the GPU: ``[batch, rows, cols]``."""

    def __call__(self, s: GPUArray, amin: float, top_db: float | None) -> None:
        batch = s.shape[0]
        per = s.size // batch
        launch = _DB_LAUNCHES.get(s.size)
        maxes = s.reshape(batch, per).max(axis=1)
        top = float("inf") if top_db is None else float(top_db)
        launch(s, maxes, batch, per, 10.0, amin, top, 1.0, 0.0)


@dataclass(frozen=True, slots=True)
class ReferenceDb:
    """``power_to_db`` in place on the CPU backend (float64)."""

    def __call__(self, s: GPUArray, amin: float, top_db: float | None) -> None:
        c.write_into(s, reference.power_to_db(c.f32(s).astype(np.float64), amin, top_db))


_DB_LAUNCHES: PlanCache[Any] = PlanCache("audio_db_launch", _db_launch)
_DB: PlanCache[CudaDb | ReferenceDb] = PlanCache(
    "power_to_db", per_backend(cpu=lambda: ReferenceDb(), cuda=lambda: CudaDb())
)


def power_to_db(s: GPUArray, amin: float = 1e-10, top_db: float | None = 80.0) -> GPUArray:
    """Decibels of a power spectrogram ``[..., rows, frames]``: ``10 log10(max(s, amin))``.

    Floored at (maximum - ``top_db``) per batch item (the last two axes; librosa's
    ``power_to_db`` with ``ref=1.0`` takes the maximum over the whole array, the same for one
    spectrogram); ``top_db=None`` keeps everything. A new float32 array.
    """
    op = "power_to_db"
    x = c.check_array(s, "s", dtypes=(sig.F32,))
    if x.ndim < 2:
        raise ValueError(f"{op}: s must be [..., rows, frames], got shape {x.shape}")
    if not float(amin) > 0:
        raise ValueError(f"{op}: amin must be positive, got {amin!r}")
    if top_db is not None and not float(top_db) >= 0:
        raise ValueError(f"{op}: top_db must be non-negative or None, got {top_db!r}")
    out = x.copy()
    if out.size:
        batch = out.size // (x.shape[-1] * x.shape[-2])
        _DB.get()(out.reshape(batch, x.shape[-2], x.shape[-1]), float(amin), top_db)
    return out


def mfcc(
    x: GPUArray,
    sr: float = 22050,
    n_mfcc: int = 20,
    n_fft: int = 2048,
    hop_length: int | None = None,
    n_mels: int = 128,
    *,
    top_db: float | None = 80.0,
    **mel_args: Any,
) -> GPUArray:
    """Mel-frequency cepstral coefficients ``[..., n_mfcc, n_frames]``, as ``librosa.feature.mfcc``.

    The orthonormal DCT-II of ``power_to_db(mel_spectrogram(x, ...))`` over the mel axis
    (decibels ``10 log10(max(S, 1e-10))``, floored at (max - ``top_db``) per batch item;
    librosa floors at the maximum of the whole array, the same for one signal). ``mel_args``
    go to :func:`mel_spectrogram` (``win_length``, ``window``, ``center``, ``pad_mode``,
    ``fmin``, ``fmax``, ``htk``, ``norm``).
    """
    op = "mfcc"
    n_mfcc = validation.size(n_mfcc, "n_mfcc", op, minimum=1)
    if n_mfcc > n_mels:
        raise ValueError(f"{op}: n_mfcc ({n_mfcc}) must be at most n_mels ({n_mels})")
    mel = mel_spectrogram(x, sr, n_fft, hop_length, n_mels=n_mels, power=2.0, **mel_args)
    lead = mel.shape[:-2]
    frames = mel.shape[-1]
    batch = int(np.prod(lead)) if lead else 1
    s = power_to_db(mel, 1e-10, top_db).reshape(batch, n_mels, frames)
    dct = _DCT.get(n_mfcc, n_mels, gp.get_device())
    return gp.matmul(dct, s, allow_tf32=False).reshape(*lead, n_mfcc, frames)


_DCT: PlanCache[GPUArray] = PlanCache(
    "audio_dct", lambda n_out, n_in, device: sig.upload(reference.dct_basis(n_out, n_in))
)
