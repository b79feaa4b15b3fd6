"""CTranslate2 ``model.bin``: the weights file of a faster-whisper model directory.

The format (little-endian; CTranslate2's ``models/model.cc`` writes it, binary versions 3-6):

```text
u32 binary_version
str spec_name                  (version >= 2; "WhisperSpec" for Whisper)
u32 spec_revision              (version >= 2)
u32 num_variables
num_variables x {
    str name                   ("encoder/layer_0/self_attention/linear_0/weight", ...)
    u8  rank
    u32 dims[rank]
    u8  dtype                  (version >= 4: 0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16)
    u32 num_bytes              (version >= 4; before: u8 item_size then u32 num_elements)
    u8  data[num_bytes]        (row-major, no padding)
}
u32 num_aliases                (version >= 3)
num_aliases x { str alias; str variable_name }   (tied weights: projection -> embeddings)

str = u16 length (counting a trailing NUL) + that many bytes
```

Scalars (rank 0) carry the spec's options (``decoder/num_heads``, ``decoder/activation``, ...).
The file is untrusted input: every read is bounded by the bytes left, every tensor's byte
count must equal its shape times its item size, names must be unique UTF-8, and a truncated
file is reported as such. Tensors are NumPy views of a memory map (read-only, no copy).
"""

from __future__ import annotations

import math
import mmap
import pathlib
import struct
from typing import Any

import numpy as np

from ..errors import CTranslate2FormatError

__all__ = ["CT2_DTYPES", "SUPPORTED_VERSIONS", "CTranslate2File"]

#: CTranslate2's DataType codes (``include/ctranslate2/types.h``).
CT2_DTYPES: dict[int, tuple[str, np.dtype[Any] | None]] = {
    0: ("float32", np.dtype("<f4")),
    1: ("int8", np.dtype("i1")),
    2: ("int16", np.dtype("<i2")),
    3: ("int32", np.dtype("<i4")),
    4: ("float16", np.dtype("<f2")),
    5: ("bfloat16", None),  # read as raw uint16 and widened in ``tensor``
}
_ITEM_SIZES = {0: 4, 1: 1, 2: 2, 3: 4, 4: 2, 5: 2}
SUPPORTED_VERSIONS = range(3, 7)
#: Bounds on untrusted counts (a Whisper spec has a few hundred variables of rank <= 3).
_MAX_VARIABLES = 1 << 20
_MAX_RANK = 8


class _Reader:
    """Bounded little-endian reads over a byte buffer; running out says ``truncated``."""

    def __init__(self, buf: Any, path: pathlib.Path) -> None:
        self.buf, self.path, self.pos = buf, path, 0

    def error(self, what: str) -> CTranslate2FormatError:
        return CTranslate2FormatError(f"{self.path}: {what}", path=str(self.path))

    def take(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > len(self.buf):
            raise self.error(
                f"truncated: {what} needs {n} bytes at offset {start} but the file ends at "
                f"{len(self.buf)} (an interrupted download? fetch model.bin again)"
            )
        self.pos += n
        return start

    def unpack(self, fmt: str, what: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        return struct.unpack_from(fmt, self.buf, self.take(size, what))

    def string(self, what: str) -> str:
        (n,) = self.unpack("<H", what)
        raw = bytes(self.buf[self.take(n, what) : self.pos])
        try:
            return raw.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{what} at offset {self.pos - n} is not UTF-8") from exc


class CTranslate2File:
    """A parsed ``model.bin``: ``spec``, ``version``, and ``variables`` (name -> NumPy array).

    Aliases resolve to the arrays they name. Arrays are read-only views of the file mapping;
    bfloat16 ones are widened to float32 copies.
    """

    def __init__(self, path: str | pathlib.Path) -> None:
        self.path = pathlib.Path(path)
        try:
            with self.path.open("rb") as f:
                self._map: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
            raise CTranslate2FormatError(
                f"{self.path}: cannot read: {exc}", path=str(self.path)
            ) from exc
        r = _Reader(memoryview(self._map), self.path)
        (self.version,) = r.unpack("<I", "the binary version")
        if self.version not in SUPPORTED_VERSIONS:
            raise r.error(
                f"binary version {self.version}; this reader handles CTranslate2 model.bin "
                f"versions {SUPPORTED_VERSIONS.start} to {SUPPORTED_VERSIONS.stop - 1} (is it a "
                "CTranslate2 file? PyTorch .bin checkpoints are not loaded: convert to "
                "safetensors)"
            )
        self.spec = r.string("the spec name")
        (self.revision,) = r.unpack("<I", "the spec revision")
        (count,) = r.unpack("<I", "the variable count")
        if count > _MAX_VARIABLES:
            raise r.error(f"claims {count} variables (corrupt header)")
        self.variables: dict[str, np.ndarray] = {}
        self.dtypes: dict[str, str] = {}
        for _ in range(count):
            self._variable(r)
        (aliases,) = r.unpack("<I", "the alias count")
        if aliases > _MAX_VARIABLES:
            raise r.error(f"claims {aliases} aliases (corrupt header)")
        for _ in range(aliases):
            alias, target = r.string("an alias"), r.string("an alias target")
            if target not in self.variables:
                raise r.error(f"alias {alias!r} names {target!r}, which is not in the file")
            self.variables[alias] = self.variables[target]
            self.dtypes[alias] = self.dtypes[target]

    def _variable(self, r: _Reader) -> None:
        name = r.string("a variable name")
        if name in self.variables:
            raise r.error(f"variable {name!r} appears twice")
        (rank,) = r.unpack("<B", f"the rank of {name!r}")
        if rank > _MAX_RANK:
            raise r.error(f"variable {name!r} claims rank {rank}")
        shape = r.unpack(f"<{rank}I", f"the shape of {name!r}")
        if self.version >= 4:
            (code,) = r.unpack("<B", f"the dtype of {name!r}")
            (nbytes,) = r.unpack("<I", f"the size of {name!r}")
        else:
            (item,) = r.unpack("<B", f"the item size of {name!r}")
            (elements,) = r.unpack("<I", f"the size of {name!r}")
            code = {4: 0, 2: 4, 1: 1}.get(item, -1)
            nbytes = elements * item
        if code not in CT2_DTYPES:
            raise r.error(f"variable {name!r} has unknown dtype code {code}")
        expected = math.prod(shape) * _ITEM_SIZES[code]
        if nbytes != expected:
            raise r.error(
                f"variable {name!r} of shape {shape} and dtype {CT2_DTYPES[code][0]} needs "
                f"{expected} bytes but claims {nbytes}"
            )
        start = r.take(nbytes, f"the data of {name!r}")
        label, dtype = CT2_DTYPES[code]
        if dtype is None:  # bfloat16: the high half of a float32
            raw = np.frombuffer(self._map, np.dtype("<u2"), math.prod(shape), start)
            arr = (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        else:
            arr = np.frombuffer(self._map, dtype, math.prod(shape), start).reshape(shape)
        self.variables[name] = arr
        self.dtypes[name] = label

    def scalar(self, name: str, default: int | None = None) -> int | None:
        """The value of a rank-0 option variable, or ``default`` when absent."""
        arr = self.variables.get(name)
        return default if arr is None else int(arr.reshape(-1)[0])
