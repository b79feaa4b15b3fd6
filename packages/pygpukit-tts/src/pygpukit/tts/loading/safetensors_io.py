"""A minimal SafeTensors reader and writer for Kokoro's float tensors (F32, F16, BF16).

Kokoro checkpoints are small (82 M parameters), so tensors are read whole into NumPy float32.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

from ..errors import ModelFileError

__all__ = ["read_safetensors", "write_safetensors"]

_MAX_HEADER = 100 * 1024 * 1024
_SIZES = {"F32": 4, "F16": 2, "BF16": 2}


def _error(path: Path, what: str) -> ModelFileError:
    return ModelFileError(f"{path}: {what}; re-download or re-export the file", path=str(path))


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of ``path`` as float32."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read: {exc}", path=str(path)) from exc
    if len(data) < 8:
        raise _error(path, f"{len(data)} bytes is shorter than a safetensors header")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > min(_MAX_HEADER, len(data) - 8):
        raise _error(path, f"the header claims {header_len} bytes: truncated or not safetensors")
    try:
        header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _error(path, f"the header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise _error(path, "the header is not a JSON object")
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + header_len :]
    out: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        try:
            code, shape, (begin, end) = entry["dtype"], list(entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise _error(path, f"tensor {name!r} has a malformed header entry") from exc
        if code not in _SIZES:
            raise _error(path, f"tensor {name!r} has dtype {code}; Kokoro weights are F32/F16/BF16")
        if not 0 <= begin <= end <= len(body) or end - begin != math.prod(shape) * _SIZES[code]:
            raise _error(path, f"tensor {name!r} lies outside the data (the file is truncated)")
        raw = np.frombuffer(body[begin:end], dtype="<u2" if code != "F32" else "<f4")
        if code == "F16":
            arr = raw.view("<f2").astype(np.float32)
        elif code == "BF16":
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = raw.astype(np.float32)
        out[name] = arr.reshape(shape)
    return out


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Write float32 tensors as a ``.safetensors`` file."""
    header: dict[str, object] = {}
    chunks = []
    offset = 0
    for name, value in tensors.items():
        raw = np.ascontiguousarray(value, dtype="<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(value.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for raw in chunks:
            f.write(raw)
