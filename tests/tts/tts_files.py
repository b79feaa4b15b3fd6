"""Writers of small Kokoro checkpoints for the tests: a random tiny model as an HF-style folder.

The folder holds ``config.json``, ``model.safetensors`` with KModel's names (weight norm
unfolded into ``weight_g``/``weight_v``, as a converted ``.pth`` has it, under the ``module.``
prefix KModel's checkpoint uses) and ``voices/`` with one ``.npy`` voice pack.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from pygpukit.safetensors import write_safetensors
from pygpukit.tts.config import KokoroConfig
from pygpukit.tts.random_model import TINY_CONFIG, random_state, random_voice

WEIGHT_NORMED = (".conv1", ".conv2", ".conv1x1", ".pool", ".cnn.0.0", ".ups.0", ".convs1.0")


def unfold_weight_norm(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Split some conv weights into (g, v) with ``v`` a rescaled copy, as weight_norm stores."""
    out: dict[str, np.ndarray] = {}
    for name, value in state.items():
        base = name[: -len(".weight")]
        if name.endswith(".weight") and value.ndim == 3 and base.endswith(WEIGHT_NORMED):
            v = value * 3.0  # any positive rescale: the fold restores the norm from g
            g = np.sqrt((value.astype(np.float64) ** 2).reshape(value.shape[0], -1).sum(1))
            out[base + ".weight_v"] = v
            out[base + ".weight_g"] = g.reshape(-1, 1, 1).astype(np.float32)
        else:
            out[name] = value
    return out


def write_tiny_checkpoint(
    folder: pathlib.Path, config: KokoroConfig = TINY_CONFIG, seed: int = 0
) -> dict[str, np.ndarray]:
    """Write a random tiny model; returns its folded state dict."""
    folder.mkdir(parents=True, exist_ok=True)
    state = random_state(config, seed)
    unfolded = {f"module.{k}": v for k, v in unfold_weight_norm(state).items()}
    write_safetensors(folder / "model.safetensors", unfolded)
    (folder / "config.json").write_text(json.dumps(config.to_dict()), encoding="utf-8")
    (folder / "voices").mkdir(exist_ok=True)
    np.save(folder / "voices" / "af_test.npy", random_voice(config, seed + 1))
    return state
