"""Reading and writing ``.safetensors`` files on the host, with the header treated as untrusted.

A file is an 8-byte little-endian header length, a JSON header mapping each tensor name to its
``dtype``, ``shape`` and ``data_offsets`` (relative to the end of the header), then the data.
:class:`SafeTensorsFile` bounds the header length, requires every dtype known, every byte
range inside the data and of exactly ``prod(shape) * itemsize`` bytes, and no two ranges
overlapping; a tensor is then a read-only NumPy view of a memory map. The model packages build
their loaders on it (uploading with :func:`pygpukit.from_numpy`) and raise their own error
types from :class:`~pygpukit.errors.SafeTensorsError`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import pathlib
import struct
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

import numpy as np

from .dtypes import bfloat16
from .errors import PyGPUkitError, SafeTensorsError

__all__ = ["DTYPES", "MAX_HEADER_BYTES", "SafeTensorsFile", "write_safetensors"]

#: The largest header accepted (the format's own reference reader uses the same bound).
MAX_HEADER_BYTES = 100 * 1024 * 1024

#: SafeTensors dtype codes and the NumPy types their data is viewed as.
DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_CODES = {dtype: code for code, dtype in DTYPES.items()}


class SafeTensorsFile:
    """One memory-mapped ``.safetensors`` file with its validated header.

    ``tensors`` maps each name (in file order) to ``(code, shape, begin, end)``, the byte range
    relative to ``data_start``; ``metadata`` is the header's ``__metadata__`` (``{}`` if none).
    Raises :attr:`error_type` (:class:`~pygpukit.errors.SafeTensorsError` unless a subclass
    sets its package's own) naming the file (and the tensor) when the file cannot be read or
    its header is malformed.
    """

    #: The type of the errors raised: a package's loader sets its own (same constructor:
    #: a message, then ``path`` and ``tensor`` by keyword).
    error_type: Callable[..., PyGPUkitError] = SafeTensorsError

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = pathlib.Path(path)
        try:
            size = self.path.stat().st_size
            with self.path.open("rb") as f:
                raw = self._read_header(f, size)
        except OSError as exc:
            raise self._error(f"cannot read: {exc}") from exc
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._error(f"the header is not valid JSON: {exc}") from exc
        if not isinstance(header, dict):
            raise self._error("the header is not a JSON object")
        self.metadata: dict[str, Any] = header.pop("__metadata__", None) or {}
        self.data_start = 8 + len(raw)
        self.data_len = size - self.data_start
        self.tensors: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, entry in header.items():
            self.tensors[name] = self._check_entry(name, entry)
        ranges = sorted((b, e, n) for n, (_, _, b, e) in self.tensors.items() if e > b)
        for (_, prev_end, prev), (begin, _, name) in itertools.pairwise(ranges):
            if begin < prev_end:
                raise self._error(
                    f"the data of {name!r} overlaps that of {prev!r}: the header is corrupt",
                    name,
                )
        self._map: np.memmap[Any, np.dtype[np.uint8]] | None = None

    def _read_header(self, f: BinaryIO, size: int) -> bytes:
        """The header's bytes, after checking the length the file claims for them."""
        if size < 8:
            raise self._error(f"the file is {size} bytes, shorter than the 8-byte header length")
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > MAX_HEADER_BYTES:
            raise self._error(
                f"the header claims {header_len} bytes, more than the {MAX_HEADER_BYTES} "
                "bytes a header may have: the file is corrupt or not a safetensors file"
            )
        if header_len > size - 8:
            raise self._error(
                f"the header claims {header_len} bytes but the file has {size - 8} after "
                "the length: the file is truncated"
            )
        return bytes(f.read(header_len))

    def _error(self, what: str, tensor: str | None = None) -> PyGPUkitError:
        """The error to raise for ``what``, of the type :attr:`error_type`."""
        where = f" (tensor {tensor!r})" if tensor else ""
        return self.error_type(
            f"{self.path}{where}: {what}. Re-download or re-export the file.",
            path=str(self.path),
            tensor=tensor,
        )

    def _check_entry(self, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
        if not isinstance(entry, dict):
            raise self._error("the header entry is not an object", name)
        code, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if code not in DTYPES:
            raise self._error(f"unknown dtype {code!r} (known: {', '.join(DTYPES)})", name)
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise self._error(f"the shape {shape!r} is not a list of non-negative integers", name)
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        ):
            raise self._error(f"data_offsets {offsets!r} is not a pair of integers", name)
        begin, end = offsets
        if not 0 <= begin <= end <= self.data_len:
            raise self._error(
                f"data_offsets [{begin}, {end}] fall outside the {self.data_len} data bytes "
                "(the file is truncated or the header corrupt)",
                name,
            )
        expected = math.prod(shape) * DTYPES[code].itemsize
        if end - begin != expected:
            raise self._error(
                f"shape {shape} of {code} needs {expected} bytes but data_offsets span "
                f"{end - begin}",
                name,
            )
        return code, tuple(shape), begin, end

    def host_view(self, name: str) -> np.ndarray:
        """The tensor as a read-only NumPy view of the memory map (no copy), in its stored dtype."""
        code, shape, begin, end = self.tensors[name]
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        raw = self._map[self.data_start + begin : self.data_start + end]
        return raw.view(DTYPES[code]).reshape(shape)

    def close(self) -> None:
        """Drop the memory map (it unmaps when the last view goes)."""
        self._map = None


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, np.ndarray],
    *,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``tensors`` (in order) as one ``.safetensors`` file, each in its own dtype.

    Every dtype of :data:`DTYPES` is written (bfloat16 as ``BF16``); another one raises
    ``TypeError`` naming the tensor: convert it first. ``metadata`` becomes ``__metadata__``.
    """
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    arrays = []
    offset = 0
    for name, value in tensors.items():
        arr = np.asarray(value)  # not ascontiguousarray: it turns a 0-d array into 1-d
        code = _CODES.get(arr.dtype.newbyteorder("="))
        if code is None:
            raise TypeError(
                f"tensor {name!r} has dtype {arr.dtype}, which safetensors does not store; "
                f"convert it to one of {', '.join(d.name for d in DTYPES.values())}"
            )
        header[name] = {
            "dtype": code,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
        arrays.append(arr.astype(arr.dtype.newbyteorder("<"), copy=False))
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with pathlib.Path(path).open("wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for arr in arrays:
            f.write(arr.tobytes())
