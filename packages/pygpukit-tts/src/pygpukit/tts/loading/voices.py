"""Voice packs: ``[510, 1, 256]`` float32 style tables, one row per phoneme count.

Read from a ``.safetensors`` file (one tensor per voice, or a single tensor named after the
file), a ``.npy`` file (the voice named after the file), a ``.npz`` / kokoro-onnx
``voices-*.bin`` NumPy archive (one array per voice; read with ``allow_pickle=False``), or a
folder of such files.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..config import STYLE_TABLE_ROWS
from ..errors import VoiceError
from .safetensors import read_safetensors

__all__ = ["VOICE_SUFFIXES", "check_voice", "read_voices"]

VOICE_SUFFIXES = (".safetensors", ".npy", ".npz", ".bin", ".pt")


def check_voice(name: str, table: np.ndarray, style_dim: int = 256) -> np.ndarray:
    """The table as float32 ``[510, 1, style_dim]``; a ``[510, style_dim]`` table is accepted."""
    arr = np.asarray(table)
    if arr.ndim == 2:
        arr = arr[:, None, :]
    if arr.shape != (STYLE_TABLE_ROWS, 1, style_dim) or arr.dtype.kind != "f":
        raise VoiceError(
            f"voice {name!r}: a style table of shape {tuple(np.shape(table))} and dtype "
            f"{np.asarray(table).dtype}; Kokoro voices are float "
            f"[{STYLE_TABLE_ROWS}, 1, {style_dim}]"
        )
    if not np.isfinite(arr).all():
        raise VoiceError(f"voice {name!r}: the style table holds NaN or infinite values")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _read_archive(path: Path) -> dict[str, np.ndarray]:
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return {path.stem: loaded}
        with loaded as archive:
            return {k: archive[k] for k in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise VoiceError(
            f"{path}: not a NumPy voice archive ({exc}); pickled voices are refused, pass "
            ".npy, .npz, kokoro-onnx voices-*.bin or .safetensors packs",
            path=str(path),
        ) from exc


def _read_file(path: Path) -> dict[str, np.ndarray]:
    suffix = path.suffix.lower()
    if suffix == ".pt":
        raise VoiceError(
            f"{path}: a PyTorch pickle; convert it once with torch: "
            "numpy.save('NAME.npy', torch.load('NAME.pt').numpy())",
            path=str(path),
        )
    if suffix == ".safetensors":
        tensors = read_safetensors(path)
        if len(tensors) == 1:
            return {path.stem: next(iter(tensors.values()))}
        return tensors
    if suffix in (".npy", ".npz", ".bin"):
        return _read_archive(path)
    raise VoiceError(
        f"{path}: unknown voice file type {suffix!r} (expected one of {VOICE_SUFFIXES})",
        path=str(path),
    )


def read_voices(path: Path, style_dim: int = 256) -> dict[str, np.ndarray]:
    """Every voice of a file or folder, by name, each checked to be ``[510, 1, style_dim]``."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in VOICE_SUFFIXES)
        files = [p for p in files if not p.name.startswith("model")]
    elif path.is_file():
        files = [path]
    else:
        raise VoiceError(f"{path}: no such voice file or folder", path=str(path))
    voices: dict[str, np.ndarray] = {}
    for file in files:
        for name, table in _read_file(file).items():
            voices[name] = check_voice(name, table, style_dim)
    return voices
