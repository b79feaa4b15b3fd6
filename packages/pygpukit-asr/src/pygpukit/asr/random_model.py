"""Random-weight Whisper checkpoints from a seed: the same bytes on every machine.

The weights of a Hugging Face ``WhisperForConditionalGeneration`` are drawn with NumPy's
``default_rng(seed)`` in the fixed order of :func:`hf_tensors`, so a test regenerates exactly
the checkpoint a reference run (transformers, on another machine) was given: only the seed and
the sizes are stored. :func:`write_checkpoint` writes a model directory (``config.json`` +
``model.safetensors``) that ``asr.load`` and transformers' ``from_pretrained`` both read;
:func:`random_model` builds a :class:`~pygpukit.asr.WhisperModel` directly (benchmarks).

Scales keep activations near unit size through the layers: linear rows of norm about 1,
LayerNorm weights around 1, small biases.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from pygpukit.safetensors import write_safetensors

from .loading import _map_hf
from .whisper.config import WhisperConfig

__all__ = ["hf_tensors", "random_model", "random_weights", "write_checkpoint"]


def hf_tensors(cfg: WhisperConfig) -> Iterator[tuple[str, tuple[int, ...], str]]:
    """``(HF name without "model.", shape, kind)`` of every tensor, in drawing order.

    ``kind`` is ``linear``, ``bias``, ``norm``, ``norm_bias``, ``embed`` or ``conv``.
    """
    c, f = cfg.d_model, cfg.ffn_dim
    yield "encoder.conv1.weight", (c, cfg.n_mels, 3), "conv"
    yield "encoder.conv1.bias", (c,), "bias"
    yield "encoder.conv2.weight", (c, c, 3), "conv"
    yield "encoder.conv2.bias", (c,), "bias"
    yield "encoder.embed_positions.weight", (cfg.max_source_positions, c), "embed"
    for side, layers in (("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)):
        if side == "decoder":
            yield "decoder.embed_tokens.weight", (cfg.vocab_size, c), "embed"
            yield "decoder.embed_positions.weight", (cfg.max_target_positions, c), "embed"
        attns = ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",)
        for i in range(layers):
            p = f"{side}.layers.{i}."
            for a in attns:
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    yield p + f"{a}.{proj}.weight", (c, c), "linear"
                    if proj != "k_proj":
                        yield p + f"{a}.{proj}.bias", (c,), "bias"
                norm = "self_attn_layer_norm" if a == "self_attn" else "encoder_attn_layer_norm"
                yield p + f"{norm}.weight", (c,), "norm"
                yield p + f"{norm}.bias", (c,), "norm_bias"
            yield p + "fc1.weight", (f, c), "linear"
            yield p + "fc1.bias", (f,), "bias"
            yield p + "fc2.weight", (c, f), "linear"
            yield p + "fc2.bias", (c,), "bias"
            yield p + "final_layer_norm.weight", (c,), "norm"
            yield p + "final_layer_norm.bias", (c,), "norm_bias"
        yield f"{side}.layer_norm.weight", (c,), "norm"
        yield f"{side}.layer_norm.bias", (c,), "norm_bias"


def random_weights(cfg: WhisperConfig, seed: int, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    """Weights under their HF names (no ``model.`` prefix), drawn from ``seed``.

    Drawn in float32 and rounded once to ``dtype``.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape, kind in hf_tensors(cfg):
        x = rng.standard_normal(shape, dtype=np.float32)
        if kind in ("linear", "conv"):
            x *= np.float32(1.0 / np.sqrt(np.prod(shape[1:])))
        elif kind == "embed":
            x *= np.float32(0.5)
        elif kind == "norm":
            x = np.float32(1.0) + np.float32(0.1) * x
        else:
            x *= np.float32(0.02)
        out[name] = x.astype(dtype, copy=False)
    return out


def write_checkpoint(folder: str | pathlib.Path, cfg: WhisperConfig, seed: int) -> pathlib.Path:
    """Write ``config.json`` and ``model.safetensors`` (float32) of the seeded weights."""
    path = pathlib.Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg.to_hf(), indent=1))
    w = random_weights(cfg, seed)
    write_safetensors(path / "model.safetensors", {"model." + k: v for k, v in w.items()})
    return path


def random_model(cfg: WhisperConfig, seed: int, *, dtype: Any = "float16") -> Any:
    """A :class:`~pygpukit.asr.WhisperModel` with seeded random weights and no tokenizer."""
    from .api import WhisperModel

    weights = _map_hf(random_weights(cfg, seed, np.float16), cfg, f"random(seed={seed})")
    return WhisperModel(cfg, weights, None, dtype=dtype, path=f"random(seed={seed})")
