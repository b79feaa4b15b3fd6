"""pygpukit.tts's exception types: what was wrong with a model file, a voice or a request.

Every type derives from :class:`TTSError`, itself a :class:`pygpukit.errors.PyGPUkitError`, so
``except PyGPUkitError`` catches them with the runtime's. Each message names the file (and the
tensor or voice at fault, where one is) and says what to do.
"""

from __future__ import annotations

from pygpukit.errors import PyGPUkitError

__all__ = [
    "G2PUnavailableError",
    "ModelFileError",
    "PhonemeError",
    "TTSError",
    "VoiceError",
]


class TTSError(PyGPUkitError):
    """Base class of the errors of ``pygpukit.tts``.

    ``path`` is the file or directory at fault, where one is.
    """

    def __init__(self, message: str, *, path: str | None = None):
        self.path = path
        super().__init__(message)


class ModelFileError(TTSError, ValueError):
    """A model file or directory cannot be loaded.

    Missing or truncated files, a graph that is not Kokoro, a pickle (``.pth``), a tensor that
    contradicts the config.
    """


class VoiceError(TTSError, ValueError):
    """A voice is unknown, or a voice pack is not a ``[510, 1, 256]`` float32 style table."""


class PhonemeError(TTSError, ValueError):
    """A request cannot be synthesized: empty text, phonemes outside the vocabulary, bad speed."""


class G2PUnavailableError(TTSError, RuntimeError):
    """Text was given but no grapheme-to-phoneme converter (misaki, espeak-ng) is installed."""
