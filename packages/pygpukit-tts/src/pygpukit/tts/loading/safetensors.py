"""Kokoro's float tensors (F32, F16, BF16) from one ``.safetensors`` file, as float32 arrays.

The file's untrusted header is checked by :class:`pygpukit.safetensors.SafeTensorsFile`; this
module turns its errors into :class:`~pygpukit.tts.errors.ModelFileError`. Kokoro checkpoints
are small (82 M parameters), so every tensor is copied out whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pygpukit import safetensors
from pygpukit.errors import SafeTensorsError

from ..errors import ModelFileError

__all__ = ["read_safetensors"]

_FLOAT_CODES = ("F32", "F16", "BF16")


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of ``path`` as float32."""
    try:
        f = safetensors.SafeTensorsFile(path)
    except SafeTensorsError as exc:
        raise ModelFileError(str(exc), path=exc.path) from exc
    out: dict[str, np.ndarray] = {}
    for name, (code, *_) in f.tensors.items():
        if code not in _FLOAT_CODES:
            raise ModelFileError(
                f"{path}: tensor {name!r} has dtype {code}; Kokoro weights are F32/F16/BF16. "
                "Re-export the file with float weights.",
                path=str(path),
            )
        out[name] = f.host_view(name).astype(np.float32)
    f.close()
    return out
