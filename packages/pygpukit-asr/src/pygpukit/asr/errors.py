"""pygpukit.asr's exception types: what was wrong with a model directory, a file or a request.

Every type derives from :class:`ASRError`, itself a :class:`pygpukit.errors.PyGPUkitError`, so
``except PyGPUkitError`` catches them with the runtime's. Each message names the file (and the
tensor, where one is at fault) and says what to do.
"""

from __future__ import annotations

from pygpukit.errors import PyGPUkitError

__all__ = [
    "ASRError",
    "AudioError",
    "CTranslate2FormatError",
    "ModelFormatError",
    "UnsupportedModelError",
]


class ASRError(PyGPUkitError):
    """Base class of the errors of ``pygpukit.asr``.

    ``path`` is the file or directory at fault and ``tensor`` the tensor name, where one is.
    """

    def __init__(self, message: str, *, path: str | None = None, tensor: str | None = None):
        self.path = path
        self.tensor = tensor
        super().__init__(message)


class ModelFormatError(ASRError, ValueError):
    """A model directory or file cannot be read.

    Missing files or tensors, a pickle checkpoint, a malformed header, a tensor whose shape
    contradicts the config.
    """


class CTranslate2FormatError(ModelFormatError):
    """A CTranslate2 ``model.bin`` is malformed or truncated (its header is untrusted input)."""


class UnsupportedModelError(ASRError, ValueError):
    """The files are readable but hold something this version does not run.

    A quantized (int8/int16) CTranslate2 model, a model that is not Whisper, a task the model
    was not trained for (``translate`` on an English-only model), an unknown language code.
    """


class AudioError(ASRError, ValueError):
    """Audio that cannot be transcribed.

    Unreadable or empty files, a wrong dtype, rank or sample rate, non-finite samples.
    """
