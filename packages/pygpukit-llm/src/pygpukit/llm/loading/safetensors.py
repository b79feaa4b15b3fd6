"""Hugging Face SafeTensors model directories: one ``model.safetensors`` or indexed shards.

Each file's untrusted header is parsed and checked by :class:`pygpukit.safetensors.SafeTensorsFile`
(bounded length, known dtypes, byte ranges inside the data, of the right size and not
overlapping); a tensor is uploaded from its slice of the file's memory map.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import safetensors
from pygpukit.array import GPUArray

from ..errors import CheckpointError, SafeTensorsError
from .checkpoint import Checkpoint, TensorInfo

__all__ = ["SafeTensorsCheckpoint", "SafeTensorsFile"]

_FLOAT_CODES = ("F32", "F16", "BF16")
_PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl")
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


class SafeTensorsFile(safetensors.SafeTensorsFile):
    """One memory-mapped ``.safetensors`` file of a checkpoint: validated header, device upload.

    Integer tensors are parsed (a checkpoint may carry integer buffers) but refused by
    :meth:`load`. Every error is a :class:`~pygpukit.llm.errors.SafeTensorsError`.
    """

    error_type = SafeTensorsError

    def info(self, name: str) -> TensorInfo:
        """The tensor's shape, stored dtype and size."""
        code, shape, begin, end = self.tensors[name]
        return TensorInfo(name, shape, safetensors.DTYPES[code].name, end - begin)

    def load(self, name: str, dtype: np.dtype[Any]) -> GPUArray:
        """Upload the tensor's bytes and convert them to ``dtype`` on the device."""
        code = self.tensors[name][0]
        if code not in _FLOAT_CODES:
            raise self._error(
                f"dtype {code} is not a float type; weights must be F32, F16 or BF16", name
            )
        raw = gp.from_numpy(self.host_view(name))
        return raw if raw.dtype == dtype else raw.astype(dtype)


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
