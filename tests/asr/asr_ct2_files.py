"""A writer of CTranslate2 ``model.bin`` files for the loader tests (the format of
``pygpukit.asr.loading.ctranslate2``), from this package's internal weight names."""

from __future__ import annotations

import pathlib
import struct
from collections.abc import Mapping

import numpy as np

from pygpukit.asr.loading import _CT2_GLOBAL, _CT2_LAYER

CODES = {np.dtype("<f4"): 0, np.dtype("i1"): 1, np.dtype("<i2"): 2, np.dtype("<i4"): 3,
         np.dtype("<f2"): 4}  # fmt: skip


def _string(s: str) -> bytes:
    raw = s.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def ct2_variables(weights: Mapping[str, np.ndarray], heads: int) -> dict[str, np.ndarray]:
    """CTranslate2 names of internal weights, plus the spec's scalar options."""
    glob = {v: k for k, v in _CT2_GLOBAL.items()}
    layer = {v: k for k, v in _CT2_LAYER.items()}
    out: dict[str, np.ndarray] = {}
    for name, arr in weights.items():
        if name in glob:
            out[glob[name]] = arr
            continue
        side, i, rest = name.split(".", 2)
        out[f"{'encoder' if side == 'enc' else 'decoder'}/layer_{i}/{layer[rest]}"] = arr
    out["encoder/num_heads"] = np.array(heads, np.int16)
    out["decoder/num_heads"] = np.array(heads, np.int16)
    out["decoder/activation"] = np.array(3, np.int8)
    return out


def write_model_bin(
    path: pathlib.Path, variables: Mapping[str, np.ndarray], *, version: int = 6,
    spec: str = "WhisperSpec", aliases: Mapping[str, str] | None = None,
) -> None:  # fmt: skip
    """Write ``variables`` (NumPy arrays of CODES' dtypes) as a ``model.bin``."""
    parts = [struct.pack("<I", version), _string(spec), struct.pack("<I", 3)]
    parts.append(struct.pack("<I", len(variables)))
    for name, value in variables.items():
        arr = np.ascontiguousarray(value)
        parts += [_string(name), struct.pack("<B", arr.ndim),
                  struct.pack(f"<{arr.ndim}I", *arr.shape),
                  struct.pack("<B", CODES[arr.dtype.newbyteorder("<")]),
                  struct.pack("<I", arr.nbytes), arr.tobytes()]  # fmt: skip
    aliases = aliases or {}
    parts.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        parts += [_string(alias), _string(target)]
    path.write_bytes(b"".join(parts))


def write_ct2_dir(
    folder: pathlib.Path, weights: Mapping[str, np.ndarray], heads: int, dtype: str = "float16",
    tokenizer: pathlib.Path | None = None,
) -> pathlib.Path:  # fmt: skip
    """A faster-whisper model folder: ``model.bin`` (weights in ``dtype``), ``config.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    var = {k: (v.astype(dtype) if v.dtype.kind == "f" else v)
           for k, v in ct2_variables(weights, heads).items()}  # fmt: skip
    del var["decoder/embeddings/weight"]  # stored once, under the projection's alias target
    var["decoder/embeddings/weight"] = weights["dec.embed"].astype(dtype)
    write_model_bin(folder / "model.bin", var,
                    aliases={"decoder/projection/weight": "decoder/embeddings/weight"})  # fmt: skip
    (folder / "config.json").write_text('{"alignment_heads": [[1, 0]], "suppress_ids": [1, 2], '
                                        '"suppress_ids_begin": [220, 50256]}')  # fmt: skip
    if tokenizer is not None:
        (folder / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    return folder
