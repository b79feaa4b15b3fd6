"""Whisper model directories -> a config and NumPy weights under this package's names.

Two layouts are read (:func:`read_model`):

- **Hugging Face** (``config.json`` with ``model_type: whisper``, ``model.safetensors`` or
  indexed shards, ``tokenizer.json``, ``generation_config.json``);
- **CTranslate2 / faster-whisper** (``model.bin`` in CTranslate2's format, ``config.json``
  with the decoding lists, ``tokenizer.json``), float32, float16 or bfloat16 weights.

Weights are renamed into one internal table (:data:`WEIGHT_NAMES` documents it): q/k/v of a
self-attention are fused into ``qkv`` (the key projection has no bias in Whisper: a zero bias
is inserted), the cross-attention's k/v into ``cross_kv``, and the convolutions stored as
``[C_out, C_in, 3]``. Pickle checkpoints (``pytorch_model.bin``, ``*.pt``) are refused.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ModelFormatError, UnsupportedModelError
from ..whisper.config import WhisperConfig
from .ctranslate2 import CTranslate2File
from .safetensors import read_safetensors

__all__ = ["WEIGHT_NAMES", "ModelFiles", "read_model"]

#: Internal per-layer weight names (``{side}.{i}.{name}``, side ``enc`` or ``dec``).
WEIGHT_NAMES = {
    "enc": ("attn_ln.w", "attn_ln.b", "qkv.w", "qkv.b", "out.w", "out.b", "mlp_ln.w",
            "mlp_ln.b", "fc1.w", "fc1.b", "fc2.w", "fc2.b"),
    "dec": ("attn_ln.w", "attn_ln.b", "qkv.w", "qkv.b", "out.w", "out.b", "cross_ln.w",
            "cross_ln.b", "cross_q.w", "cross_q.b", "cross_kv.w", "cross_kv.b", "cross_out.w",
            "cross_out.b", "mlp_ln.w", "mlp_ln.b", "fc1.w", "fc1.b", "fc2.w", "fc2.b"),
    "global": ("enc.conv1.w", "enc.conv1.b", "enc.conv2.w", "enc.conv2.b", "enc.pos",
               "enc.ln.w", "enc.ln.b", "dec.embed", "dec.pos", "dec.ln.w", "dec.ln.b"),
}  # fmt: skip
_PICKLES = ("pytorch_model.bin", "model.pt", "pytorch_model.pt", "model.pth", "model.ckpt")


@dataclass
class ModelFiles:
    """What a model directory holds: the config, the weights, the tokenizer file, the format."""

    config: WhisperConfig
    weights: dict[str, np.ndarray]
    tokenizer_file: pathlib.Path | None
    format: str  # "huggingface" or "ctranslate2"
    path: pathlib.Path


def _json(path: pathlib.Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{path}: not readable JSON: {exc}", path=str(path)) from exc
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path}: expected a JSON object", path=str(path))
    return data


def _is_ctranslate2(path: pathlib.Path) -> bool:
    """A CTranslate2 file starts with a small u32 version and a u16-prefixed spec name."""
    try:
        with path.open("rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return len(head) == 8 and int.from_bytes(head[:4], "little") < 64 and head[:2] != b"PK"


def read_model(path: str | pathlib.Path) -> ModelFiles:
    """Read a Whisper model directory (Hugging Face or CTranslate2) into :class:`ModelFiles`."""
    root = pathlib.Path(path)
    if not root.exists():
        raise ModelFormatError(f"{root}: no such file or directory", path=str(root))
    if root.is_file():
        if root.name == "model.bin" and _is_ctranslate2(root):
            root = root.parent
        else:
            raise ModelFormatError(
                f"{root}: pass the model directory (with config.json and model.safetensors or "
                "a CTranslate2 model.bin), not a file",
                path=str(root),
            )
    tokenizer = root / "tokenizer.json"
    tok = tokenizer if tokenizer.is_file() else None
    if (root / "model.bin").is_file() and _is_ctranslate2(root / "model.bin"):
        return _read_ctranslate2(root, tok)
    if (root / "model.safetensors").is_file() or (root / "model.safetensors.index.json").is_file():
        return _read_huggingface(root, tok)
    pickles = [p.name for p in root.iterdir() if p.name in _PICKLES or p.suffix in (".pt", ".pth")]
    if pickles or (root / "model.bin").is_file():
        found = pickles or ["model.bin"]
        raise ModelFormatError(
            f"{root}: {', '.join(found)} is a pickle checkpoint, which is never loaded (unpickling "
            "runs code from the file); use the model's model.safetensors (Hugging Face) or a "
            "CTranslate2 model.bin (faster-whisper)",
            path=str(root),
        )
    raise ModelFormatError(
        f"{root}: no Whisper weights found (expected model.safetensors, "
        "model.safetensors.index.json or a CTranslate2 model.bin)",
        path=str(root),
    )


# --- Hugging Face ----------------------------------------------------------------------------

_HF_GLOBAL = {
    "enc.conv1.w": "encoder.conv1.weight", "enc.conv1.b": "encoder.conv1.bias",
    "enc.conv2.w": "encoder.conv2.weight", "enc.conv2.b": "encoder.conv2.bias",
    "enc.pos": "encoder.embed_positions.weight", "enc.ln.w": "encoder.layer_norm.weight",
    "enc.ln.b": "encoder.layer_norm.bias", "dec.embed": "decoder.embed_tokens.weight",
    "dec.pos": "decoder.embed_positions.weight", "dec.ln.w": "decoder.layer_norm.weight",
    "dec.ln.b": "decoder.layer_norm.bias",
}  # fmt: skip
_HF_LAYER = {
    "self_attn_layer_norm": "attn_ln", "self_attn.out_proj": "out",
    "encoder_attn_layer_norm": "cross_ln", "encoder_attn.q_proj": "cross_q",
    "encoder_attn.out_proj": "cross_out", "final_layer_norm": "mlp_ln", "fc1": "fc1",
    "fc2": "fc2",
}  # fmt: skip


def _read_huggingface(root: pathlib.Path, tok: pathlib.Path | None) -> ModelFiles:
    cfg_path = root / "config.json"
    if not cfg_path.is_file():
        raise ModelFormatError(f"{root}: config.json is missing", path=str(root))
    cfg = _json(cfg_path)
    if cfg.get("model_type", "whisper") != "whisper":
        raise UnsupportedModelError(
            f"{cfg_path}: model_type {cfg.get('model_type')!r} is not whisper", path=str(cfg_path)
        )
    gen_path = root / "generation_config.json"
    gen = _json(gen_path) if gen_path.is_file() else {}
    try:
        config = WhisperConfig.from_hf(cfg, gen)
    except (TypeError, ValueError, KeyError) as exc:
        raise ModelFormatError(f"{cfg_path}: {exc}", path=str(cfg_path)) from exc
    raw: dict[str, np.ndarray] = {}
    index = root / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(_json(index).get("weight_map", {}).values()))
        for shard in shards:
            if "/" in shard or "\\" in shard or shard.startswith(".."):
                raise ModelFormatError(f"{index}: shard name {shard!r} leaves the directory")
            raw.update(read_safetensors(root / shard))
    else:
        raw.update(read_safetensors(root / "model.safetensors"))
    raw = {k.removeprefix("model."): v for k, v in raw.items()}
    return ModelFiles(config, _map_hf(raw, config, str(root)), tok, "huggingface", root)


def _map_hf(raw: dict[str, np.ndarray], cfg: WhisperConfig, source: str) -> dict[str, np.ndarray]:
    def get(name: str) -> np.ndarray:
        if name not in raw:
            raise ModelFormatError(
                f"{source}: tensor {name!r} is missing", path=source, tensor=name
            )
        return raw[name]

    w: dict[str, np.ndarray] = {}
    for side, prefix, layers in (("enc", "encoder", cfg.encoder_layers),
                                 ("dec", "decoder", cfg.decoder_layers)):  # fmt: skip
        for i in range(layers):
            p = f"{prefix}.layers.{i}."
            q, k, v = (get(p + f"self_attn.{n}_proj.weight") for n in "qkv")
            w[f"{side}.{i}.qkv.w"] = np.concatenate([q, k, v])
            qb, vb = get(p + "self_attn.q_proj.bias"), get(p + "self_attn.v_proj.bias")
            w[f"{side}.{i}.qkv.b"] = np.concatenate([qb, np.zeros_like(qb), vb])
            for hf, ours in _HF_LAYER.items():
                if side == "enc" and ours.startswith("cross"):
                    continue
                w[f"{side}.{i}.{ours}.w"] = get(p + hf + ".weight")
                w[f"{side}.{i}.{ours}.b"] = get(p + hf + ".bias")
            if side == "dec":
                ck, cv = (get(p + f"encoder_attn.{n}_proj.weight") for n in "kv")
                w[f"dec.{i}.cross_kv.w"] = np.concatenate([ck, cv])
                cvb = get(p + "encoder_attn.v_proj.bias")
                w[f"dec.{i}.cross_kv.b"] = np.concatenate([np.zeros_like(cvb), cvb])
    for ours, hf in _HF_GLOBAL.items():
        w[ours] = get(hf)
    _check_shapes(w, cfg, source)
    return w


# --- CTranslate2 -----------------------------------------------------------------------------

_CT2_LAYER = {
    "self_attention/layer_norm/gamma": "attn_ln.w", "self_attention/layer_norm/beta": "attn_ln.b",
    "self_attention/linear_0/weight": "qkv.w", "self_attention/linear_0/bias": "qkv.b",
    "self_attention/linear_1/weight": "out.w", "self_attention/linear_1/bias": "out.b",
    "attention/layer_norm/gamma": "cross_ln.w", "attention/layer_norm/beta": "cross_ln.b",
    "attention/linear_0/weight": "cross_q.w", "attention/linear_0/bias": "cross_q.b",
    "attention/linear_1/weight": "cross_kv.w", "attention/linear_1/bias": "cross_kv.b",
    "attention/linear_2/weight": "cross_out.w", "attention/linear_2/bias": "cross_out.b",
    "ffn/layer_norm/gamma": "mlp_ln.w", "ffn/layer_norm/beta": "mlp_ln.b",
    "ffn/linear_0/weight": "fc1.w", "ffn/linear_0/bias": "fc1.b",
    "ffn/linear_1/weight": "fc2.w", "ffn/linear_1/bias": "fc2.b",
}  # fmt: skip
_CT2_GLOBAL = {
    "encoder/conv1/weight": "enc.conv1.w", "encoder/conv1/bias": "enc.conv1.b",
    "encoder/conv2/weight": "enc.conv2.w", "encoder/conv2/bias": "enc.conv2.b",
    "encoder/position_encodings/encodings": "enc.pos",
    "encoder/layer_norm/gamma": "enc.ln.w", "encoder/layer_norm/beta": "enc.ln.b",
    "decoder/embeddings/weight": "dec.embed",
    "decoder/position_encodings/encodings": "dec.pos",
    "decoder/layer_norm/gamma": "dec.ln.w", "decoder/layer_norm/beta": "dec.ln.b",
}  # fmt: skip
_FLOAT_CT2 = ("float32", "float16", "bfloat16")


def _read_ctranslate2(root: pathlib.Path, tok: pathlib.Path | None) -> ModelFiles:
    f = CTranslate2File(root / "model.bin")
    if f.spec != "WhisperSpec":
        raise UnsupportedModelError(
            f"{f.path}: a CTranslate2 {f.spec or 'model'}, not Whisper (WhisperSpec)",
            path=str(f.path),
        )
    quantized = sorted(
        {
            f.dtypes[n]
            for n in f.variables
            if n.endswith("/weight") and f.dtypes[n] not in _FLOAT_CT2
        }
    )
    if quantized:
        raise UnsupportedModelError(
            f"{f.path}: {'/'.join(quantized)} weights (a quantized CTranslate2 model); "
            "supported are float16, float32 and bfloat16 weights: convert again with "
            "`ct2-transformers-converter --quantization float16`, or load the Hugging Face "
            "safetensors directory",
            path=str(f.path),
        )
    cfg_path = root / "config.json"
    extra = _json(cfg_path) if cfg_path.is_file() else {}
    w: dict[str, np.ndarray] = {}
    layers = {"enc": 0, "dec": 0}
    for name, arr in f.variables.items():
        if name in _CT2_GLOBAL:
            w[_CT2_GLOBAL[name]] = arr
            continue
        parts = name.split("/", 2)
        if len(parts) == 3 and parts[1].startswith("layer_") and parts[2] in _CT2_LAYER:
            side = "enc" if parts[0] == "encoder" else "dec"
            i = int(parts[1][6:])
            layers[side] = max(layers[side], i + 1)
            w[f"{side}.{i}.{_CT2_LAYER[parts[2]]}"] = arr
    for required in ("dec.embed", "enc.conv1.w", "enc.pos", "dec.pos"):
        if required not in w:
            raise ModelFormatError(
                f"{f.path}: tensor for {required!r} is missing", path=str(f.path)
            )
    d_model = int(w["dec.embed"].shape[1])
    heads = {s: f.scalar(f"{n}/num_heads") for s, n in (("enc", "encoder"), ("dec", "decoder"))}
    config = WhisperConfig(
        n_mels=int(w["enc.conv1.w"].shape[1]),
        d_model=d_model,
        encoder_layers=layers["enc"],
        encoder_heads=int(heads["enc"] or d_model // 64),
        decoder_layers=layers["dec"],
        decoder_heads=int(heads["dec"] or d_model // 64),
        ffn_dim=int(w["enc.0.fc1.w"].shape[0]) if "enc.0.fc1.w" in w else 4 * d_model,
        vocab_size=int(w["dec.embed"].shape[0]),
        max_source_positions=int(w["enc.pos"].shape[0]),
        max_target_positions=int(w["dec.pos"].shape[0]),
        alignment_heads=tuple((int(a), int(b)) for a, b in extra.get("alignment_heads", ())),
        suppress_tokens=tuple(int(t) for t in extra.get("suppress_ids", ())),
        begin_suppress_tokens=tuple(int(t) for t in extra.get("suppress_ids_begin", ())),
        extra={"ctranslate2": extra, "binary_version": f.version},
    )
    _check_shapes(w, config, str(f.path))
    return ModelFiles(config, w, tok, "ctranslate2", root)


def _expected_shapes(cfg: WhisperConfig) -> dict[str, tuple[int, ...]]:
    """The shape of every internal weight for ``cfg``."""
    c, f = cfg.d_model, cfg.ffn_dim
    shapes: dict[str, tuple[int, ...]] = {
        "enc.conv1.w": (c, cfg.n_mels, 3), "enc.conv1.b": (c,), "enc.conv2.w": (c, c, 3),
        "enc.conv2.b": (c,), "enc.pos": (cfg.max_source_positions, c), "enc.ln.w": (c,),
        "enc.ln.b": (c,), "dec.embed": (cfg.vocab_size, c),
        "dec.pos": (cfg.max_target_positions, c), "dec.ln.w": (c,), "dec.ln.b": (c,),
    }  # fmt: skip
    per: dict[str, Callable[[], tuple[int, ...]]] = {
        "qkv.w": lambda: (3 * c, c), "qkv.b": lambda: (3 * c,), "cross_kv.w": lambda: (2 * c, c),
        "cross_kv.b": lambda: (2 * c,), "fc1.w": lambda: (f, c), "fc1.b": lambda: (f,),
        "fc2.w": lambda: (c, f),
    }  # fmt: skip
    for side, layers in (("enc", cfg.encoder_layers), ("dec", cfg.decoder_layers)):
        for i in range(layers):
            for n in WEIGHT_NAMES[side]:
                shapes[f"{side}.{i}.{n}"] = (
                    per[n]()
                    if n in per
                    else (
                        (c, c) if n.endswith(".w") and not n.split(".")[0].endswith("ln") else (c,)
                    )
                )
    return shapes


def _check_shapes(w: dict[str, np.ndarray], cfg: WhisperConfig, source: str) -> None:
    """Raise :class:`ModelFormatError` for a missing weight or a shape the sizes contradict."""
    for name, shape in _expected_shapes(cfg).items():
        if name not in w:
            raise ModelFormatError(
                f"{source}: weight {name!r} is missing", path=source, tensor=name
            )
        if tuple(w[name].shape) != shape:
            raise ModelFormatError(
                f"{source}: weight {name!r} has shape {tuple(w[name].shape)}, expected {shape} "
                "from the config (config and weights of different models?)",
                path=source,
                tensor=name,
            )
