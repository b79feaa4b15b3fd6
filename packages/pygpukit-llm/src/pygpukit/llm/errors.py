"""pygpukit.llm's exception types: what was wrong with a checkpoint, a model or a request.

Every type derives from :class:`LLMError`, itself a :class:`pygpukit.errors.PyGPUkitError`, so
``except PyGPUkitError`` catches them with the runtime's. Each message names the file (and the
tensor, where one is at fault) and says what to do.
"""

from __future__ import annotations

from pygpukit.errors import PyGPUkitError

__all__ = [
    "CheckpointError",
    "GGUFError",
    "LLMError",
    "SafeTensorsError",
    "TokenizerError",
    "UnsupportedModelError",
]


class LLMError(PyGPUkitError):
    """Base class of the errors of ``pygpukit.llm``.

    ``path`` is the file or directory at fault and ``tensor`` the tensor name, where one is.
    """

    def __init__(self, message: str, *, path: str | None = None, tensor: str | None = None):
        self.path = path
        self.tensor = tensor
        super().__init__(message)


class CheckpointError(LLMError, ValueError):
    """A model directory or file cannot be loaded.

    Missing files, shards or tensors, a pickle format, a tensor that contradicts the config.
    """


class SafeTensorsError(CheckpointError):
    """A ``.safetensors`` file is malformed (the header is untrusted input and checked)."""


class GGUFError(CheckpointError):
    """A ``.gguf`` file is malformed or holds something this version cannot load."""


class UnsupportedModelError(LLMError, ValueError):
    """The checkpoint is readable but describes a model that ``pygpukit.llm`` does not implement.

    An architecture, quant type or tokenizer type outside the supported ones.
    """


class TokenizerError(LLMError, ValueError):
    """A tokenizer or chat template problem.

    Malformed tokenizer files, text asked of a model without a tokenizer, or a chat template
    that failed (a message without a role, ``raise_exception`` in the template).
    """
