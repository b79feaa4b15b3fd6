"""The GGUF container (llama.cpp's model file), versions 2 and 3: header, metadata, tensor infos.

Layout: magic ``GGUF``, a uint32 version, uint64 tensor and metadata counts, the metadata
key/value pairs (typed values, arrays included), the tensor infos (name, dims innermost first,
ggml type, offset into the data section), padding to ``general.alignment`` (32 by default),
then the tensor data. All little-endian. The file is untrusted: every count, length and offset
is checked against the bytes actually present.
"""

from __future__ import annotations

import itertools
import math
import pathlib
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GGUFError, UnsupportedModelError

__all__ = ["GGML_TYPES", "LOADABLE_TYPES", "GGUFFile", "GGUFTensor"]

_MAGIC = b"GGUF"
_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
#: ggml keeps at most four dimensions.
_MAX_DIMS = 4
#: Arrays of arrays deeper than this are refused (real files nest at most once); the bound
#: keeps a crafted file from exhausting the parser's recursion.
_MAX_NESTING = 8

#: ggml tensor types: id -> (name, elements per block, bytes per block).
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
}
#: The types ``load`` dequantizes (on the GPU, or in NumPy on the CPU backend).
LOADABLE_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")

# Metadata value types: id -> struct format of a scalar (strings and arrays are special).
_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_FLOAT32, _STRING, _ARRAY = 6, 8, 9
_NUMPY_SCALARS = {k: np.dtype(v) for k, v in _SCALARS.items()}


@dataclass(frozen=True)
class GGUFTensor:
    """A tensor info: ``shape`` row-major (the GGUF dims reversed), byte range in the file."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    type_name: str
    offset: int  # absolute, in the file
    nbytes: int


class _Reader:
    """Bounds-checked little-endian reads from the mapped file."""

    def __init__(self, buf: memoryview, path: pathlib.Path) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path

    def error(self, what: str, tensor: str | None = None) -> GGUFError:
        where = f" (tensor {tensor!r})" if tensor else ""
        return GGUFError(
            f"{self.path}{where}: {what}. The file is corrupt, truncated or not a GGUF file; "
            "re-download it.",
            path=str(self.path),
            tensor=tensor,
        )

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.error(
                f"{what} needs {n} bytes at offset {self.pos} but the file has {len(self.buf)}"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.scalar("<Q", what)
        raw = self.take(n, what)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{what} is not valid UTF-8: {exc}") from exc

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype == _FLOAT32:  # the shortest decimal that rounds to it: 1e-05, not 9.99e-06
            return float(str(np.float32(self.scalar("<f", what))))
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype == _ARRAY:
            item_type = self.scalar("<I", what)
            count = self.scalar("<Q", what)
            if item_type in _NUMPY_SCALARS:
                dt = _NUMPY_SCALARS[item_type]
                raw = self.take(count * dt.itemsize, what)
                return np.frombuffer(raw, dtype=dt.newbyteorder("<")).tolist()
            if item_type == _STRING:
                if count * 8 > len(self.buf) - self.pos:  # each string has an 8-byte length
                    raise self.error(f"{what}: an array of {count} strings cannot fit")
                return [self.string(what) for _ in range(count)]
            if item_type == _ARRAY:
                if depth >= _MAX_NESTING:
                    raise self.error(f"{what}: arrays nested more than {_MAX_NESTING} deep")
                if count * 12 > len(self.buf) - self.pos:
                    raise self.error(f"{what}: an array of {count} arrays cannot fit")
                return [self.value(_ARRAY, what, depth + 1) for _ in range(count)]
            raise self.error(f"{what}: unknown array item type {item_type}")
        raise self.error(f"{what}: unknown metadata value type {vtype}")


class GGUFFile:
    """A parsed GGUF file: ``version``, ``metadata`` (dict) and ``tensors`` (by GGUF name).

    The file is memory-mapped for the life of the object; :meth:`raw` returns a tensor's bytes
    as a NumPy view of the map.
    """

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise GGUFError(f"{path}: cannot read: {exc}", path=str(path)) from exc
        if size < 24:
            raise GGUFError(
                f"{path}: {size} bytes, too short for a GGUF header (24 bytes); the file is "
                "truncated or not a GGUF file",
                path=str(path),
            )
        self._map: np.memmap[Any, np.dtype[np.uint8]] | None = np.memmap(
            path, dtype=np.uint8, mode="r"
        )
        r = _Reader(memoryview(self._map), path)  # type: ignore[arg-type]
        magic = bytes(r.take(4, "magic"))
        if magic != _MAGIC:
            raise r.error(f"magic {magic!r} is not {_MAGIC!r}")
        self.version = r.scalar("<I", "version")
        if self.version not in _VERSIONS:
            raise r.error(
                f"GGUF version {self.version} is not supported (versions 2 and 3 are); "
                "convert the model with a current llama.cpp"
            )
        n_tensors = r.scalar("<Q", "tensor count")
        n_kv = r.scalar("<Q", "metadata count")
        # Each entry takes at least 12 (key/value) or 24 (tensor info) bytes: a cheap bound
        # against counts that would loop for ages on a corrupt file.
        if n_kv * 12 + n_tensors * 24 > size:
            raise r.error(f"{n_kv} metadata entries and {n_tensors} tensors cannot fit")
        self.metadata: dict[str, Any] = {}
        for i in range(n_kv):
            key = r.string(f"metadata key {i}")
            vtype = r.scalar("<I", f"metadata {key!r} type")
            self.metadata[key] = r.value(vtype, f"metadata {key!r}")
        alignment = self.metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise r.error(f"general.alignment {alignment!r} is not a power of two")
        infos = []
        for i in range(n_tensors):
            name = r.string(f"tensor info {i} name")
            n_dims = r.scalar("<I", f"tensor {name!r} dims")
            if not 1 <= n_dims <= _MAX_DIMS:
                raise r.error(f"{n_dims} dimensions (ggml has 1 to {_MAX_DIMS})", name)
            dims = [r.scalar("<Q", f"tensor {name!r} dims") for _ in range(n_dims)]
            gtype = r.scalar("<I", f"tensor {name!r} type")
            offset = r.scalar("<Q", f"tensor {name!r} offset")
            infos.append((name, dims, gtype, offset))
        data_start = -(-r.pos // alignment) * alignment
        self.tensors: dict[str, GGUFTensor] = {}
        for name, dims, gtype, offset in infos:
            self.tensors[name] = self._tensor(r, name, dims, gtype, offset, data_start, alignment)
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        for (_, prev_end, prev), (begin, _, name) in itertools.pairwise(spans):
            if begin < prev_end:
                raise r.error(f"its data overlaps that of {prev!r}", name)

    def _tensor(
        self,
        r: _Reader,
        name: str,
        dims: list[int],
        gtype: int,
        offset: int,
        data_start: int,
        alignment: int,
    ) -> GGUFTensor:
        if name in self.tensors:
            raise r.error("the name appears twice", name)
        if gtype not in GGML_TYPES:
            raise r.error(f"unknown ggml type {gtype}", name)
        type_name, block, block_bytes = GGML_TYPES[gtype]
        if dims[0] % block:
            raise r.error(
                f"first dimension {dims[0]} is not a multiple of {type_name}'s {block}", name
            )
        nbytes = math.prod(dims) // block * block_bytes
        start = data_start + offset
        if offset % alignment or start + nbytes > len(r.buf):
            raise r.error(
                f"data at offset {offset} ({nbytes} bytes) is misaligned or past the end of the "
                f"file ({len(r.buf)} bytes)",
                name,
            )
        return GGUFTensor(name, tuple(reversed(dims)), gtype, type_name, start, nbytes)

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes of tensor ``name`` (uint8, a view of the map)."""
        t = self.tensors[name]
        if t.type_name not in LOADABLE_TYPES:
            raise UnsupportedModelError(
                f"{self.path}: tensor {name!r} is stored as {t.type_name}; pygpukit.llm loads "
                f"GGUF tensors of types {', '.join(LOADABLE_TYPES)}. Use a GGUF quantized to one "
                "of them (e.g. Q8_0 or Q4_1), or the model's SafeTensors",
                path=str(self.path),
                tensor=name,
            )
        assert self._map is not None, "the GGUF file was closed"
        return self._map[t.offset : t.offset + t.nbytes]

    def close(self) -> None:
        """Drop the memory map (it unmaps when the last view goes)."""
        self._map = None
