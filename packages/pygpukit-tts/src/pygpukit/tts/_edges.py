"""The two spectral steps of the generator at each utterance's own end in a padded batch.

Everything else in Kokoro sees a padded step as the zero padding an utterance alone would see
(:mod:`pygpukit.tts._masking`). The generator's spectral steps do not:

- the STFT of the harmonic source pads the signal by reflection at both ends (``center=True``):
  a padded utterance's last frames would read the padding instead of its reflected end. Here
  each utterance is reflected at its own end (a gather with indices computed on the device),
  then framed without centring: the same frames as alone;
- the inverse STFT divides by the summed squared window of the frames present: the first
  padded frame (zero magnitude) still adds its window to the last ``hop`` samples' sum. Here
  those samples are scaled back by the ratio of the two sums, which depends only on the window.

So an utterance's audio in a padded batch, or in a length bucket of a CUDA graph, equals its
audio alone up to rounding. A batch with nothing padded takes the plain calls.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.ops.audio.stft import istft, stft

from ._masking import Lengths

__all__ = ["end_envelope_ratio", "padded_istft", "padded_stft"]


def padded_stft(
    signal: GPUArray, samples: Lengths, n_fft: int, hop: int
) -> tuple[GPUArray, GPUArray]:
    """Polar STFT (Hann, ``center=True``, reflect) of ``signal`` ``[B, L]``.

    Each row is reflected at its own valid length ``samples`` (``samples.width == L``).
    """
    if samples.full:
        result = stft(signal, n_fft, hop, output="polar")
        assert isinstance(result, tuple)
        return result
    b, width = signal.shape
    pad = n_fft // 2
    last = samples.device.reshape(b, 1) - 1  # each row's last valid sample
    offset = gp.arange(-pad, width + pad)  # the centred signal's sample positions
    # Reflect at 0 and at `last`: |s| folds the left end, last - |last - s| the right one.
    source = last - gp.abs(last - gp.abs(offset))
    source = gp.clip(source, 0, width - 1) + gp.arange(0, b * width, width).reshape(b, 1)
    centred = gp.take(signal.reshape(-1), source.reshape(-1), mode="clip")
    result = stft(centred.reshape(b, width + 2 * pad), n_fft, hop, center=False, output="polar")
    assert isinstance(result, tuple)
    return result


@lru_cache(maxsize=8)
def end_envelope_ratio(n_fft: int, hop: int) -> np.ndarray:
    """The iSTFT's correction of the last ``hop`` samples of a padded row, float32 ``[hop]``.

    Per sample: the summed squared Hann window of every frame over the same sum without the
    frame that starts there. The frame starting ``hop`` samples before a signal's end (centred
    framing) is the first one past it; a padded batch has it (with zero magnitude), the
    utterance alone does not.
    """
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    squared = window**2
    # Sample n of the last hop lies at offset n + k * hop of the frames starting k hops earlier.
    present = np.array(
        [
            sum(squared[n + k * hop] for k in range(1, -(-n_fft // hop)) if n + k * hop < n_fft)
            for n in range(hop)
        ]
    )
    return ((present + squared[:hop]) / present).astype(np.float32)


def ratio_table(n_fft: int, hop: int) -> GPUArray:
    """``[1, ratios..., 1]`` float32 on the current device: :func:`padded_istft`'s correction.

    An upload: a caller that replays :func:`padded_istft` in a CUDA graph makes it once,
    outside the capture, and keeps it as long as it synthesizes (a network does).
    """
    table = np.concatenate([[1.0], end_envelope_ratio(n_fft, hop), [1.0]]).astype(np.float32)
    return gp.from_numpy(table)


def padded_istft(
    magnitude: GPUArray,
    phase: GPUArray,
    samples: Lengths,
    n_fft: int,
    hop: int,
    ratios: GPUArray | None = None,
) -> GPUArray:
    """Inverse polar STFT (Hann, ``center=True``) ``[B, samples.width]``.

    Each row ends at its valid length ``samples``; the frames past each end must have zero
    magnitude. ``ratios``: :func:`ratio_table` ``(n_fft, hop)``, made here when not given (an
    upload, which a CUDA graph capture refuses: captured callers pass their own).
    """
    audio = istft(magnitude, n_fft, hop, phase=phase)
    if samples.full:
        return audio
    b, width = audio.shape
    # Index 0 of the table before the last hop, 1 + n at its sample n, the last one after; a
    # row that fills the width has no frame past its end (all of it index 0).
    valid = samples.device.reshape(b, 1)
    start = gp.where(valid < width, valid - (hop + 1), width)
    place = gp.clip(gp.arange(width) - start, 0, hop + 1)
    if ratios is None:
        ratios = ratio_table(n_fft, hop)
    return audio * gp.take(ratios, place.reshape(-1), mode="clip").reshape(b, width)
