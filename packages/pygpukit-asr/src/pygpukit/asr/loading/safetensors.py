"""Hugging Face Whisper weights from one ``.safetensors`` file, as NumPy arrays.

The file's untrusted header is checked by :class:`pygpukit.safetensors.SafeTensorsFile`; this
module only turns its errors into :class:`~pygpukit.asr.errors.ModelFormatError` and widens
bfloat16 tensors to float32 (the model converts every weight to its own dtype later).
"""

from __future__ import annotations

import os

import numpy as np

from pygpukit import safetensors
from pygpukit.dtypes import bfloat16
from pygpukit.errors import SafeTensorsError

from ..errors import ModelFormatError

__all__ = ["read_safetensors"]


def read_safetensors(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every tensor of one ``.safetensors`` file as read-only NumPy views (bf16 widened)."""
    try:
        f = safetensors.SafeTensorsFile(path)
    except SafeTensorsError as exc:
        raise ModelFormatError(str(exc), path=exc.path, tensor=exc.tensor) from exc
    out: dict[str, np.ndarray] = {}
    for name in f.tensors:
        view = f.host_view(name)
        out[name] = view.astype(np.float32) if view.dtype == bfloat16 else view
    return out
