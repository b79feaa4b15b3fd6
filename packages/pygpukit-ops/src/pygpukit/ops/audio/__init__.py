"""pygpukit.ops.audio: spectral analysis and audio signal ops on the GPU.

One module per job:

- :mod:`.stft`: :func:`stft` / :func:`istft` for any ``n_fft`` (DFT as an fp32 matrix product);
- :mod:`.mel`: :func:`mel_filterbank`, :func:`mel_spectrogram`, Whisper's
  :func:`log_mel_spectrogram` (and :func:`pad_or_trim`), :func:`mfcc`.

Signals are float32 GPUArrays ``[..., L]`` (leading axes are a batch); spectra are float32
with real and imaginary parts on a trailing axis of 2 (see :mod:`.stft`). On the CPU backend
the same calls run NumPy float64 versions (:mod:`pygpukit.ops.reference.stft`, ``.mel``).
Guide: docs/ops-audio.md.
"""

from . import mel, stft

# Collected before the star imports: they bind the function stft() over the module of that name.
__all__ = [*mel.__all__, *stft.__all__]

from .mel import *  # noqa: F403
from .stft import *  # type: ignore[no-redef]  # noqa: F403
