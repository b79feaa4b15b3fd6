"""Hugging Face SafeTensors model directories: one ``model.safetensors`` or indexed shards.

A ``.safetensors`` file is an 8-byte little-endian header length, a JSON header mapping each
tensor name to its dtype, shape and ``data_offsets`` (relative to the end of the header), then
the data. The header is untrusted: its length is bounded, every entry's dtype must be known,
its byte range inside the data and of exactly ``prod(shape) * itemsize`` bytes, and no two
ranges may overlap. Files are memory-mapped; a tensor is uploaded from its slice of the map.
"""

from __future__ import annotations

import itertools
import json
import math
import pathlib
import struct
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from ..errors import CheckpointError, SafeTensorsError
from .checkpoint import Checkpoint, TensorInfo

__all__ = ["MAX_HEADER_BYTES", "SafeTensorsCheckpoint", "SafeTensorsFile"]

#: The largest header accepted (the format's own reference reader uses the same bound).
MAX_HEADER_BYTES = 100 * 1024 * 1024

#: SafeTensors dtype codes and their NumPy types. Loading converts float ones; the others are
#: parsed (a checkpoint may carry integer buffers) but refused by ``load``.
_DTYPES: dict[str, np.dtype[Any]] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(gp.bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_FLOAT_CODES = ("F32", "F16", "BF16")
_PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl")
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


class SafeTensorsFile:
    """One memory-mapped ``.safetensors`` file with its validated header."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise SafeTensorsError(f"{path}: cannot read: {exc}", path=str(path)) from exc
        if size < 8:
            raise self._error(f"the file is {size} bytes, shorter than the 8-byte header length")
        with path.open("rb") as f:
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
            raw = f.read(header_len)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._error(f"the header is not valid JSON: {exc}") from exc
        if not isinstance(header, dict):
            raise self._error("the header is not a JSON object")
        self.metadata: dict[str, Any] = header.pop("__metadata__", None) or {}
        self.data_start = 8 + header_len
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

    def _error(self, what: str, tensor: str | None = None) -> SafeTensorsError:
        where = f" (tensor {tensor!r})" if tensor else ""
        return SafeTensorsError(
            f"{self.path}{where}: {what}. Re-download or re-export the file.",
            path=str(self.path),
            tensor=tensor,
        )

    def _check_entry(self, name: str, entry: Any) -> tuple[str, tuple[int, ...], int, int]:
        if not isinstance(entry, dict):
            raise self._error("the header entry is not an object", name)
        code, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if code not in _DTYPES:
            known = ", ".join(_DTYPES)
            raise self._error(f"unknown dtype {code!r} (known: {known})", name)
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
        expected = math.prod(shape) * _DTYPES[code].itemsize
        if end - begin != expected:
            raise self._error(
                f"shape {shape} of {code} needs {expected} bytes but data_offsets span "
                f"{end - begin}",
                name,
            )
        return code, tuple(shape), begin, end

    def info(self, name: str) -> TensorInfo:
        """The tensor's shape, stored dtype and size."""
        code, shape, begin, end = self.tensors[name]
        return TensorInfo(name, shape, _DTYPES[code].name, end - begin)

    def host_view(self, name: str) -> np.ndarray:
        """The tensor as a read-only NumPy view of the memory map (no copy)."""
        code, shape, begin, end = self.tensors[name]
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        raw = self._map[self.data_start + begin : self.data_start + end]
        return raw.view(_DTYPES[code]).reshape(shape)

    def load(self, name: str, dtype: np.dtype[Any]) -> GPUArray:
        """Upload the tensor's bytes and convert them to ``dtype`` on the device."""
        code = self.tensors[name][0]
        if code not in _FLOAT_CODES:
            raise self._error(
                f"dtype {code} is not a float type; weights must be F32, F16 or BF16", name
            )
        raw = gp.from_numpy(self.host_view(name))
        return raw if raw.dtype == dtype else raw.astype(dtype)

    def close(self) -> None:
        """Drop the memory map (it unmaps when the last view goes)."""
        self._map = None


def _refuse_pickles(folder: pathlib.Path) -> None:
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in _PICKLE_SUFFIXES)
    if pickles:
        raise CheckpointError(
            f"{folder}: only pickle checkpoints ({', '.join(pickles[:3])}) and no .safetensors "
            "file. Pickle files can run arbitrary code when loaded, so pygpukit never unpickles "
            "them: convert once in a trusted environment, e.g. `from transformers import "
            "AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained(DIR)"
            ".save_pretrained(DIR, safe_serialization=True)`, or download the repository's "
            ".safetensors files.",
            path=str(folder),
        )
    raise CheckpointError(
        f"{folder}: no model.safetensors or {INDEX_NAME}; a Hugging Face model directory holds "
        "config.json and its weights as .safetensors",
        path=str(folder),
    )


def _read_json(path: pathlib.Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read the {what}: {exc}", path=str(path)) from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: the {what} is not a JSON object", path=str(path))
    return data


class SafeTensorsCheckpoint(Checkpoint):
    """A Hugging Face model directory with SafeTensors weights (single file or sharded)."""

    format = "safetensors"

    def __init__(self, folder: pathlib.Path) -> None:
        self.path = folder
        config = folder / "config.json"
        if not config.is_file():
            raise CheckpointError(
                f"{folder}: no config.json; a Hugging Face model directory has one beside its "
                "weights",
                path=str(folder),
            )
        self.hf_config = _read_json(config, "model config")
        gen = folder / "generation_config.json"
        self.generation_config = _read_json(gen, "generation config") if gen.is_file() else {}
        self._files: dict[str, SafeTensorsFile] = {}
        self._owner: dict[str, SafeTensorsFile] = {}
        index = folder / INDEX_NAME
        if index.is_file():
            self._open_shards(index)
        elif (folder / SINGLE_NAME).is_file():
            f = self._open_file(SINGLE_NAME, None)
            self._owner = {name: f for name in f.tensors}
        else:
            singles = sorted(folder.glob("*.safetensors"))
            if len(singles) == 1:
                f = self._open_file(singles[0].name, None)
                self._owner = {name: f for name in f.tensors}
            else:
                _refuse_pickles(folder)
        self._infos = {name: f.info(name) for name, f in self._owner.items()}

    def _open_file(self, filename: str, tensor: str | None) -> SafeTensorsFile:
        f = self._files.get(filename)
        if f is None:
            path = self.path / filename
            if not path.is_file():
                raise CheckpointError(
                    f"{path}: shard missing (it holds tensor {tensor!r} per {INDEX_NAME}); "
                    "download every shard the index lists",
                    path=str(path),
                    tensor=tensor,
                )
            f = self._files[filename] = SafeTensorsFile(path)
        return f

    def _open_shards(self, index: pathlib.Path) -> None:
        weight_map = _read_json(index, "shard index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(
                f"{index}: no weight_map (tensor name -> shard file)", path=str(index)
            )
        for name, filename in weight_map.items():
            # Only plain file names of this folder: the index is untrusted and must not
            # reach files elsewhere.
            if not isinstance(filename, str) or pathlib.PurePath(filename).name != filename:
                raise CheckpointError(
                    f"{index}: tensor {name!r} maps to {filename!r}, not a file name of "
                    "this folder",
                    path=str(index),
                    tensor=name,
                )
            f = self._open_file(filename, name)
            if name not in f.tensors:
                raise CheckpointError(
                    f"{f.path}: tensor {name!r} missing (the index lists it in this shard); "
                    "the shard is incomplete or from another version of the model",
                    path=str(f.path),
                    tensor=name,
                )
            self._owner[name] = f

    def tensor_infos(self) -> dict[str, TensorInfo]:
        """Every tensor by name, without reading data."""
        return self._infos

    def host_view(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a NumPy view of the memory map, in its stored dtype."""
        return self._owner[name].host_view(name)

    def _load_one(self, name: str, dtype: np.dtype[Any]) -> GPUArray:
        return self._owner[name].load(name, dtype)

    def close(self) -> None:
        """Unmap every file."""
        for f in self._files.values():
            f.close()
