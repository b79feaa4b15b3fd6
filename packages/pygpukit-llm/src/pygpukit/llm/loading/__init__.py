"""pygpukit.llm.loading: read model checkpoints into read-only GPUArrays.

:func:`open_checkpoint` takes a Hugging Face model directory (``config.json`` plus
``model.safetensors`` or shards listed in ``model.safetensors.index.json``) or a llama.cpp
``.gguf`` file and returns a :class:`Checkpoint`: its ``hf_config`` (a ``config.json``-style
dict), its tensor names (always the Hugging Face names) and ``load(dtype)``, which uploads the
raw bytes through the runtime's pageable upload path and converts (or dequantizes) them on the
device. Pickle checkpoints (``.bin``, ``.pth``) are refused, never unpickled.

Every malformed input raises a typed error of :mod:`pygpukit.llm.errors` naming the file and
the tensor.
"""

from __future__ import annotations

import os
import pathlib

from ..errors import CheckpointError
from .checkpoint import Checkpoint, TensorInfo

__all__ = ["Checkpoint", "TensorInfo", "open_checkpoint"]


def open_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Open a Hugging Face SafeTensors model directory or a ``.gguf`` file.

    Reads the config and the tensor headers only; tensors are read by ``Checkpoint.load``.
    Raises :class:`~pygpukit.llm.errors.CheckpointError` (or its ``SafeTensorsError`` /
    ``GGUFError`` subclasses) for a missing or malformed checkpoint.
    """
    p = pathlib.Path(path)
    if p.is_file() and p.suffix.lower() == ".gguf":
        from .gguf import GGUFCheckpoint

        return GGUFCheckpoint(p)
    if p.is_dir():
        from .safetensors import SafeTensorsCheckpoint

        return SafeTensorsCheckpoint(p)
    if p.is_file():
        raise CheckpointError(
            f"{p}: not a model checkpoint pygpukit.llm reads; give a Hugging Face model "
            "directory (config.json + *.safetensors) or a .gguf file",
            path=str(p),
        )
    raise CheckpointError(f"{p}: no such file or directory", path=str(p))
