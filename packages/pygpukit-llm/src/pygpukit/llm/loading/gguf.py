"""llama.cpp GGUF files as checkpoints, with Hugging Face names and config.

The HF config comes from the metadata; tensors are dequantized on the device
(``pygpukit.ops.dequantize``) into the model dtype.

llama.cpp's converter stores the q and k projections of ``llama``-architecture models with
the rows of each head interleaved for its RoPE layout (pairs ``(i, i + d/2)`` adjacent); the
loader undoes that permutation on the device, so the weights match the Hugging Face ones.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from ..errors import UnsupportedModelError
from .checkpoint import Checkpoint, TensorInfo
from .gguf_format import LOADABLE_TYPES, GGUFFile, GGUFTensor

__all__ = ["GGUF_ARCHITECTURES", "GGUFCheckpoint", "hf_name"]

#: GGUF ``general.architecture`` -> Hugging Face architecture class.
GGUF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
#: Architectures whose q/k rows llama.cpp's converter permutes.
_PERMUTED_QK = ("llama",)

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
#: Llama 3.1-style RoPE frequency factors: read into the config, not loaded as a weight.
ROPE_FREQS = "rope_freqs.weight"
_LAYER_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor name, or None for a name outside the tables."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _LAYER_RE.fullmatch(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    return None


def _config(f: GGUFFile) -> dict[str, Any]:
    md = f.metadata
    arch = md.get("general.architecture")
    if arch not in GGUF_ARCHITECTURES:
        raise UnsupportedModelError(
            f"{f.path}: GGUF architecture {arch!r} is not supported; supported: "
            f"{', '.join(GGUF_ARCHITECTURES)}",
            path=str(f.path),
        )

    def key(name: str, default: Any = None) -> Any:
        return md.get(f"{arch}.{name}", default)

    required = ("embedding_length", "feed_forward_length", "block_count", "attention.head_count")
    missing = [k for k in required if key(k) is None]
    if missing:
        raise UnsupportedModelError(
            f"{f.path}: GGUF metadata lacks {', '.join(f'{arch}.{k}' for k in missing)}",
            path=str(f.path),
        )
    hidden = int(key("embedding_length"))
    heads = int(key("attention.head_count"))
    tokens = md.get("tokenizer.ggml.tokens")
    embed = f.tensors.get("token_embd.weight")
    vocab = key("vocab_size") or (len(tokens) if tokens else None)
    if vocab is None and embed is not None:
        vocab = embed.shape[0]
    rope_scaling = None
    scaling_type = key("rope.scaling.type")
    if scaling_type and scaling_type != "none":
        rope_scaling = {"rope_type": scaling_type, "factor": float(key("rope.scaling.factor", 1.0))}
        original = key("rope.scaling.original_context_length")
        if original:
            rope_scaling["original_max_position_embeddings"] = int(original)
    eos = md.get("tokenizer.ggml.eos_token_id")
    config: dict[str, Any] = {
        "architectures": [GGUF_ARCHITECTURES[arch]],
        "model_type": arch,
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "head_dim": int(key("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "rope_scaling": rope_scaling,
        "vocab_size": int(vocab) if vocab is not None else None,
        "max_position_embeddings": int(key("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in f.tensors,
        "attention_bias": "blk.0.attn_q.bias" in f.tensors,
        "bos_token_id": md.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": eos,
        "pad_token_id": md.get("tokenizer.ggml.padding_token_id"),
        "hidden_act": "silu",
    }
    window = key("attention.sliding_window")
    if window:
        config["sliding_window"] = int(window)
    factors = _rope_freq_factors(f, config["head_dim"])
    if factors is not None:
        config["rope_freq_factors"] = factors
    return config


def _rope_freq_factors(f: GGUFFile, head_dim: int) -> list[float] | None:
    """The RoPE frequency divisors of llama.cpp's ``rope_freqs.weight``, or None without it.

    ``head_dim // 2`` float32 numbers: how its converter stores Llama 3.1's ``llama3`` scaling.
    They go into the config (``rope_freq_factors``) rather than the weights: the RoPE tables
    are built from them once, on the host.
    """
    t = f.tensors.get(ROPE_FREQS)
    if t is None:
        return None
    if t.type_name != "F32" or t.shape != (head_dim // 2,):
        raise UnsupportedModelError(
            f"{f.path}: tensor {ROPE_FREQS!r} must be F32 of shape ({head_dim // 2},) (head_dim "
            f"// 2 RoPE frequency factors), got {t.type_name} {t.shape}",
            path=str(f.path),
            tensor=ROPE_FREQS,
        )
    factors = np.frombuffer(f.raw(ROPE_FREQS).tobytes(), "<f4").astype(np.float64)
    if not (np.isfinite(factors).all() and (factors > 0).all()):
        raise UnsupportedModelError(
            f"{f.path}: tensor {ROPE_FREQS!r} holds a factor that is not a positive number",
            path=str(f.path),
            tensor=ROPE_FREQS,
        )
    return factors.tolist()


def _eos_ids(md: dict[str, Any]) -> list[int]:
    ids = [md.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    return list(dict.fromkeys(int(i) for i in ids if i is not None))


class GGUFCheckpoint(Checkpoint):
    """A llama.cpp ``.gguf`` file (GGUF v2/v3) opened as a checkpoint with HF names."""

    format = "gguf"

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.file = GGUFFile(path)
        #: The raw GGUF metadata (``tokenizer.ggml.*`` feeds the tokenizer).
        self.metadata = self.file.metadata
        self.hf_config = _config(self.file)
        self.generation_config = {
            "bos_token_id": self.metadata.get("tokenizer.ggml.bos_token_id"),
            "eos_token_id": _eos_ids(self.metadata),
        }
        self._tensors: dict[str, GGUFTensor] = {}
        self._infos: dict[str, TensorInfo] = {}
        for t in self.file.tensors.values():
            if t.name == ROPE_FREQS:
                continue  # in hf_config["rope_freq_factors"]
            name = hf_name(t.name)
            if name is None:
                raise UnsupportedModelError(
                    f"{path}: tensor {t.name!r} has no Hugging Face counterpart in the "
                    f"{self.hf_config['model_type']} name table; this GGUF holds a model "
                    "variant pygpukit.llm does not implement",
                    path=str(path),
                    tensor=t.name,
                )
            self._tensors[name] = t
            self._infos[name] = TensorInfo(name, t.shape, t.type_name, t.nbytes)

    def tensor_infos(self) -> dict[str, TensorInfo]:
        """Every tensor by HF name (shapes row-major, HF order), without reading data."""
        return self._infos

    def gguf_name(self, name: str) -> str:
        """The GGUF name of HF tensor ``name``."""
        return self._tensors[name].name

    def _permuted_heads(self, name: str) -> int | None:
        """Heads of a q/k projection whose rows llama.cpp interleaved, else None."""
        if self.hf_config["model_type"] not in _PERMUTED_QK:
            return None
        if name.endswith("self_attn.q_proj.weight") or name.endswith("self_attn.q_proj.bias"):
            return int(self.hf_config["num_attention_heads"])
        if name.endswith("self_attn.k_proj.weight") or name.endswith("self_attn.k_proj.bias"):
            return int(self.hf_config["num_key_value_heads"])
        return None

    def _load_one(self, name: str, dtype: np.dtype[Any]) -> GPUArray:
        from pygpukit.ops import dequantize

        t = self._tensors[name]
        if t.type_name not in LOADABLE_TYPES:
            self.file.raw(t.name)  # raises UnsupportedModelError naming the type
        raw = gp.from_numpy(self.file.raw(t.name))
        w = dequantize(raw, t.type_name, t.shape, dtype)
        del raw
        heads = self._permuted_heads(name)
        if heads is not None:
            w = _unpermute_rows(w, heads)
        return w

    def close(self) -> None:
        """Unmap the file."""
        self.file.close()


def _unpermute_rows(w: GPUArray, heads: int) -> GPUArray:
    """Undo llama.cpp's q/k row order.

    In each head, GGUF row ``2*i + a`` is HF row ``a*d/2 + i`` (``a`` in {0, 1}, ``d`` the
    head dim).
    """
    rows = w.shape[0]
    head_dim = rows // heads
    rest = w.shape[1:]
    grouped = w.reshape(heads, head_dim // 2, 2, *rest)
    return grouped.swapaxes(1, 2).contiguous().reshape(w.shape)
