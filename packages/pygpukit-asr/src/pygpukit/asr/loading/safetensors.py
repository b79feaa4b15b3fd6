"""A bounded reader and a small writer of ``.safetensors`` files (Hugging Face Whisper weights).

A file is an 8-byte little-endian header length, a JSON header mapping each tensor name to its
``dtype``, ``shape`` and ``data_offsets`` (relative to the end of the header), then the data.
The header is untrusted: its length is bounded, every dtype known, every byte range inside the
data and of exactly ``prod(shape) * itemsize`` bytes. Tensors are views of a memory map.
"""

from __future__ import annotations

import json
import math
import mmap
import pathlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ModelFormatError

__all__ = ["MAX_HEADER_BYTES", "read_safetensors", "write_safetensors"]

MAX_HEADER_BYTES = 100 * 1024 * 1024
_DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # widened to float32 below
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_CODES = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i4"): "I32"}


def _error(path: pathlib.Path, what: str, tensor: str | None = None) -> ModelFormatError:
    return ModelFormatError(f"{path}: {what}", path=str(path), tensor=tensor)


def read_safetensors(path: str | pathlib.Path) -> dict[str, np.ndarray]:
    """Every tensor of one ``.safetensors`` file as read-only NumPy views (bf16 widened)."""
    path = pathlib.Path(path)
    try:
        with path.open("rb") as f:
            buf: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise _error(path, f"cannot read: {exc}") from exc
    if len(buf) < 8:
        raise _error(path, f"the file is {len(buf)} bytes, shorter than its 8-byte header length")
    (n,) = struct.unpack_from("<Q", buf, 0)
    if n > MAX_HEADER_BYTES or n > len(buf) - 8:
        raise _error(path, f"the header claims {n} bytes of a {len(buf)}-byte file (truncated?)")
    try:
        header = json.loads(bytes(buf[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _error(path, f"the header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise _error(path, "the header is not a JSON object")
    base, size = 8 + n, len(buf) - 8 - n
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise _error(path, f"tensor {name!r} has a malformed entry: {info!r}", name) from exc
        count = math.prod(shape)
        if min(shape, default=0) < 0 or not 0 <= begin <= end <= size:
            raise _error(path, f"tensor {name!r} lies outside the data (truncated file?)", name)
        if end - begin != count * dtype.itemsize:
            raise _error(path, f"tensor {name!r} has {end - begin} bytes for shape {shape}", name)
        arr = np.frombuffer(buf, dtype, count, base + begin).reshape(shape)
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


def write_safetensors(path: str | pathlib.Path, tensors: Mapping[str, np.ndarray]) -> None:
    """Write float32/float16/int32 arrays as one ``.safetensors`` file (tests, tools)."""
    header: dict[str, Any] = {}
    offset = 0
    arrays = []
    for name, value in tensors.items():
        arr = np.ascontiguousarray(value)
        code = _CODES.get(arr.dtype.newbyteorder("<"))
        if code is None:
            raise TypeError(f"{name}: dtype {arr.dtype} is not written (float32, float16, int32)")
        header[name] = {"dtype": code, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}  # fmt: skip
        offset += arr.nbytes
        arrays.append(arr)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with pathlib.Path(path).open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for arr in arrays:
            f.write(arr.tobytes())
