"""Kokoro checkpoints: what a path holds and its KModel state dict (weight norm folded).

Accepted: an HF ``hexgrad/Kokoro-82M``-style folder (``config.json`` + ``*.safetensors`` with
KModel's state-dict names), a single ``.safetensors`` file, or a kokoro-onnx model file
(``kokoro-v1.0.onnx`` / ``kokoro-v1.0.int8.onnx``, read with the optional ``onnx`` package).
The original ``.pth`` is a pickle and is refused with the one-line conversion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import KokoroConfig
from ..errors import ModelFileError
from .onnx_graph import fill_untrained_defaults, read_onnx
from .safetensors import read_safetensors
from .voices import read_voices

__all__ = [
    "Checkpoint",
    "fold_weight_norm",
    "read_checkpoint",
    "read_voices",
]

_PICKLES = (".pth", ".pt", ".ckpt", ".pkl")
_CONVERT = (
    "convert it once where torch is installed: "
    "python -c \"import torch, safetensors.torch as st; sd = torch.load('kokoro-v1_0.pth', "
    "map_location='cpu'); st.save_file({f'{k}.{n}': t.contiguous() for k, d in sd.items() "
    "for n, t in d.items()}, 'model.safetensors')\""
)


@dataclass
class Checkpoint:
    """A loaded model: its config, float32 state dict and where its voices may be found."""

    config: KokoroConfig
    state: dict[str, np.ndarray]
    path: Path
    voice_sources: list[Path]
    #: True for a graph that rounds its activations to 8 bits (kokoro-onnx's int8 export).
    int8_activations: bool = False


def _weight_norm(v: np.ndarray, g: np.ndarray) -> np.ndarray:
    norm = np.sqrt((v.astype(np.float64) ** 2).reshape(v.shape[0], -1).sum(axis=1))
    shape = (v.shape[0],) + (1,) * (v.ndim - 1)
    return (v * (g.reshape(shape) / np.maximum(norm, 1e-12).reshape(shape))).astype(np.float32)


def fold_weight_norm(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """KModel names with ``module.`` prefixes dropped and weight norm folded into ``.weight``.

    Both spellings are folded: ``weight_g``/``weight_v`` and
    ``parametrizations.weight.original0``/``original1``.
    """
    renamed = {re.sub(r"(^|\.)module\.", r"\1", k): v for k, v in state.items()}
    out: dict[str, np.ndarray] = {}
    for name, value in renamed.items():
        if name.endswith((".weight_v", ".parametrizations.weight.original1")):
            continue
        if name.endswith(".weight_g"):
            base = name[: -len(".weight_g")]
            out[base + ".weight"] = _weight_norm(renamed[base + ".weight_v"], value)
        elif name.endswith(".parametrizations.weight.original0"):
            base = name[: -len(".parametrizations.weight.original0")]
            v = renamed[base + ".parametrizations.weight.original1"]
            out[base + ".weight"] = _weight_norm(v, value)
        else:
            out[name] = value.astype(np.float32)
    return out


def _check_against_config(config: KokoroConfig, state: dict[str, np.ndarray], path: Path) -> None:
    expected = {
        "bert.embeddings.word_embeddings.weight": (config.n_token, config.albert_embedding),
        "bert_encoder.weight": (config.hidden_dim, config.albert_hidden),
        "predictor.duration_proj.linear_layer.weight": (config.max_dur, config.hidden_dim),
        "text_encoder.embedding.weight": (config.n_token, config.hidden_dim),
    }
    for name, shape in expected.items():
        if name not in state:
            raise ModelFileError(
                f"{path}: tensor {name!r} is missing; not a complete Kokoro checkpoint",
                path=str(path),
            )
        if tuple(state[name].shape) != shape:
            raise ModelFileError(
                f"{path}: tensor {name!r} has shape {tuple(state[name].shape)} but the config "
                f"says {shape}: the config.json contradicts the weights (fix or remove it)",
                path=str(path),
            )
    post = state.get("decoder.generator.conv_post.weight")
    if post is not None and post.shape[0] != config.n_fft + 2:
        raise ModelFileError(
            f"{path}: conv_post has {post.shape[0]} outputs but the config's n_fft "
            f"{config.n_fft} needs {config.n_fft + 2}: the config contradicts the weights",
            path=str(path),
        )


def _voice_sources(folder: Path) -> list[Path]:
    found = []
    if (folder / "voices").is_dir():
        found.append(folder / "voices")
    for pattern in ("voices*.bin", "voices*.npz", "voices*.safetensors"):
        found.extend(sorted(folder.glob(pattern)))
    return found


def _pick_weights(folder: Path) -> Path:
    for pattern in ("*.safetensors", "*.onnx"):
        files = sorted(p for p in folder.glob(pattern) if not p.name.startswith("voices"))
        if files:
            return files[0]
    pickles = sorted(p for p in folder.iterdir() if p.suffix in _PICKLES)
    if pickles:
        raise ModelFileError(
            f"{pickles[0]}: a PyTorch pickle, which is never loaded (it can run code); " + _CONVERT,
            path=str(pickles[0]),
        )
    raise ModelFileError(
        f"{folder}: no model.safetensors or .onnx file in the folder", path=str(folder)
    )


def read_checkpoint(path: str | Path) -> Checkpoint:
    """The config, state dict and voice locations of a Kokoro folder or file."""
    p = Path(path)
    if not p.exists():
        raise ModelFileError(f"{p}: no such file or folder", path=str(p))
    weights = _pick_weights(p) if p.is_dir() else p
    folder = weights.parent
    suffix = weights.suffix.lower()
    if suffix in _PICKLES:
        raise ModelFileError(
            f"{weights}: a PyTorch pickle, which is never loaded (it can run code); " + _CONVERT,
            path=str(weights),
        )
    config_path = folder / "config.json"
    config = KokoroConfig.from_file(config_path) if config_path.is_file() else KokoroConfig()
    int8_activations = False
    if suffix == ".onnx":
        state, int8_activations = read_onnx(weights)
    elif suffix == ".safetensors":
        state = fold_weight_norm(read_safetensors(weights))
        fill_untrained_defaults(state)
    else:
        raise ModelFileError(
            f"{weights}: unknown model file type {suffix!r}; pass a folder with "
            "model.safetensors + config.json, a .safetensors or a kokoro-onnx .onnx file",
            path=str(weights),
        )
    _check_against_config(config, state, weights)
    return Checkpoint(config, state, weights, _voice_sources(folder), int8_activations)
