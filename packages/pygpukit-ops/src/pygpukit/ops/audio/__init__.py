"""pygpukit.ops.audio: spectral analysis and audio signal ops on the GPU.

One module per job:

- :mod:`.stft`: :func:`stft` / :func:`istft` for any ``n_fft`` (DFT as an fp32 matrix product);
- :mod:`.mel`: :func:`mel_filterbank`, :func:`mel_spectrogram`, Whisper's
  :func:`log_mel_spectrogram` (and :func:`pad_or_trim`), :func:`power_to_db`, :func:`mfcc`;
- :mod:`.resample`: :func:`resample` between any two rates (polyphase windowed sinc);
- :mod:`.pitch`: :func:`pitch` (YIN, with voicing);
- :mod:`.onset`: :func:`onset_strength`, :func:`onset_detect`;
- :mod:`.io`: :func:`load_audio` (soundfile, resampled on the GPU), :class:`AudioFileError`.

Signals are float32 GPUArrays ``[..., L]`` (leading axes are a batch); spectra are float32
with real and imaginary parts on a trailing axis of 2 (see :mod:`.stft`). On the CPU backend
the same calls run NumPy float64 versions (:mod:`pygpukit.ops.reference.stft`, ``.mel``).
Guide: docs/ops-audio.md.
"""

from . import io, mel, onset, pitch, resample, stft

# Collected before the star imports: they bind the functions stft(), pitch() and resample()
# over the modules of those names.
__all__ = [
    *io.__all__,
    *mel.__all__,
    *onset.__all__,
    *pitch.__all__,
    *resample.__all__,
    *stft.__all__,
]

from .io import *  # noqa: F403
from .mel import *  # noqa: F403
from .onset import *  # noqa: F403
from .pitch import *  # type: ignore[no-redef]  # noqa: F403
from .resample import *  # type: ignore[no-redef]  # noqa: F403
from .stft import *  # type: ignore[no-redef]  # noqa: F403
