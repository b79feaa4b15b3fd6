"""Writers of small checkpoint files for the tests: SafeTensors, GGUF and HF model folders.

Written here from the formats' specs (not with the loaders' code), so a loader bug cannot
cancel out; each writer takes hooks to produce the malformed files of the bad-input tests.
"""

from __future__ import annotations

import json
import math
import pathlib
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import pygpukit as gp

ST_CODES = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(gp.bfloat16): "BF16",
    np.dtype(np.int32): "I32",
}


def safetensors_bytes(
    tensors: Mapping[str, np.ndarray],
    *,
    header_patch: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> bytes:
    """A ``.safetensors`` file of ``tensors`` (in order); ``header_patch`` overrides entries."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    data = bytearray()
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {
            "dtype": ST_CODES[a.dtype],
            "shape": list(a.shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    for name, patch in (header_patch or {}).items():
        header[name] = {**header.get(name, {}), **patch}
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(blob)) + blob + bytes(data)


def write_hf_folder(
    folder: pathlib.Path,
    config: Mapping[str, Any],
    shards: Sequence[Mapping[str, np.ndarray]],
) -> pathlib.Path:
    """A Hugging Face model folder: config.json and one file or indexed shards."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(config)))
    if len(shards) == 1:
        (folder / "model.safetensors").write_bytes(safetensors_bytes(shards[0]))
        return folder
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        (folder / name).write_bytes(safetensors_bytes(shard))
        weight_map.update(dict.fromkeys(shard, name))
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


# ------------------------------------------------------------------------------------- GGUF

GGML_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "BF16": 30, "Q4_K": 12}
_BLOCKS = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18)}
_BLOCKS |= {"Q4_1": (32, 20), "Q4_K": (256, 144)}
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}
_FMT |= {U64: "<Q", I64: "<q", F64: "<d"}


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def _infer(value: Any) -> int:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return U32 if 0 <= value < 2**32 else I64
    if isinstance(value, float):
        return F32
    if isinstance(value, str):
        return STRING
    if isinstance(value, (list, tuple)):
        return ARRAY
    raise TypeError(type(value))


def _value(vtype: int, value: Any) -> bytes:
    if vtype == STRING:
        return _string(value)
    if vtype == ARRAY:
        items = list(value)
        item_type = _infer(items[0]) if items else U32
        return struct.pack("<IQ", item_type, len(items)) + b"".join(
            _value(item_type, v) for v in items
        )
    return struct.pack(_FMT[vtype], value)


def gguf_bytes(
    metadata: Mapping[str, Any],
    tensors: Sequence[tuple[str, tuple[int, ...], str, bytes]],
    *,
    version: int = 3,
    magic: bytes = b"GGUF",
    alignment: int = 32,
    offsets: Sequence[int] | None = None,
) -> bytes:
    """A GGUF file: ``metadata`` (values typed by ``_infer``, or ``(type, value)`` pairs) and
    ``tensors`` as (name, row-major shape, ggml type name, stored bytes); ``offsets``
    overrides the tensors' data offsets."""
    out = bytearray(magic + struct.pack("<IQQ", version, len(tensors), len(metadata)))
    for key, value in metadata.items():
        vtype, v = value if isinstance(value, tuple) else (_infer(value), value)
        out += _string(key) + struct.pack("<I", vtype) + _value(vtype, v)
    data = bytearray()
    own_offsets = []
    for _, _, _, raw in tensors:
        data += b"\0" * (-len(data) % alignment)
        own_offsets.append(len(data))
        data += raw
    for i, (name, shape, kind, _) in enumerate(tensors):
        dims = list(reversed(shape))
        off = offsets[i] if offsets is not None else own_offsets[i]
        out += _string(name) + struct.pack("<I", len(dims))
        out += struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", GGML_IDS[kind], off)
    out += b"\0" * (-len(out) % alignment)
    return bytes(out + data)


def gguf_nbytes(shape: tuple[int, ...], kind: str) -> int:
    """Stored size of a ``kind`` tensor of ``shape``."""
    block, size = _BLOCKS[kind]
    return math.prod(shape) // block * size


def permute_like_llama_cpp(w: np.ndarray, heads: int) -> np.ndarray:
    """The q/k row order llama.cpp's converter writes: per head, rows ``i`` and ``i + d/2``
    adjacent (the HF -> GGUF direction, the inverse of what the loader must do)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
