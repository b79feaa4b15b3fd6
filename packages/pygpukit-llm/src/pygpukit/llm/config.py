"""Model configuration: a frozen dataclass read from a Hugging Face ``config.json`` dict.

One dataclass serves every supported family; their differences are flags (attention bias, q/k
norm, explicit head dim, sliding window, tied embeddings, RoPE scaling), not subclasses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import UnsupportedModelError

__all__ = ["ARCHITECTURES", "ModelConfig"]

#: Architectures (``config.json`` ``architectures[0]``) and the family traits they imply.
ARCHITECTURES: dict[str, dict[str, bool]] = {
    "LlamaForCausalLM": {"qkv_bias": False, "qk_norm": False},
    "MistralForCausalLM": {"qkv_bias": False, "qk_norm": False},
    "Qwen2ForCausalLM": {"qkv_bias": True, "qk_norm": False},
    "Qwen3ForCausalLM": {"qkv_bias": False, "qk_norm": True},
}

_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def _need(cfg: Mapping[str, Any], key: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise UnsupportedModelError(f"config.json has no {key!r}; it is required")
    return cfg[key]


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UnsupportedModelError(
            f"config.json {key!r} must be a positive integer, got {value!r}"
        )
    return value


def _freq_factors(value: Any, head_dim: int) -> tuple[float, ...] | None:
    """``rope_freq_factors``: None, or ``head_dim // 2`` positive finite numbers."""
    if value is None:
        return None
    try:
        factors = tuple(float(f) for f in value)
    except (TypeError, ValueError):
        raise UnsupportedModelError(
            f"rope_freq_factors must be a list of numbers, got {value!r}"
        ) from None
    if len(factors) != head_dim // 2 or not all(math.isfinite(f) and f > 0 for f in factors):
        raise UnsupportedModelError(
            f"rope_freq_factors must be {head_dim // 2} positive numbers (head_dim // 2), got "
            f"{len(factors)}: {value!r}"
        )
    return factors


@dataclass(frozen=True)
class ModelConfig:
    """The shape and the family traits of a decoder-only transformer (Llama family)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Mapping[str, Any] | None = None
    #: Divisors of the ``head_dim // 2`` RoPE frequencies (llama.cpp's ``rope_freqs`` tensor:
    #: Llama 3.1-style scaling as stored in GGUF files), applied after ``rope_scaling``.
    rope_freq_factors: tuple[float, ...] | None = None
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)

    @property
    def rope_type(self) -> str:
        """``default``, ``linear``, ``llama3`` or ``yarn``."""
        if not self.rope_scaling:
            return "default"
        return str(self.rope_scaling.get("rope_type") or self.rope_scaling.get("type"))

    @property
    def q_size(self) -> int:
        """Rows of the query projection: ``num_heads * head_dim``."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Rows of each of the key and value projections: ``num_kv_heads * head_dim``."""
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> ModelConfig:
        """Read an HF ``config.json`` dict; :class:`UnsupportedModelError` when it cannot run."""
        archs = cfg.get("architectures") or []
        arch = archs[0] if archs else None
        if arch not in ARCHITECTURES:
            raise UnsupportedModelError(
                f"architecture {arch!r} is not supported; supported: {', '.join(ARCHITECTURES)}"
            )
        traits = ARCHITECTURES[arch]
        ints = {
            k: _positive_int(k, _need(cfg, k))
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
            )
        }
        heads = ints["num_attention_heads"]
        kv = _positive_int("num_key_value_heads", cfg.get("num_key_value_heads") or heads)
        if heads % kv:
            raise UnsupportedModelError(
                f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv})"
            )
        head_dim = cfg.get("head_dim") or ints["hidden_size"] // heads
        head_dim = _positive_int("head_dim", head_dim)
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedModelError(f"hidden_act {act!r} is not supported (only 'silu')")
        if cfg.get("mlp_bias"):
            raise UnsupportedModelError("mlp_bias = true is not supported (no MLP biases)")
        scaling = cfg.get("rope_scaling") or None
        if scaling is not None:
            kind = scaling.get("rope_type") or scaling.get("type")
            if kind not in _ROPE_TYPES:
                raise UnsupportedModelError(
                    f"rope_scaling type {kind!r} is not supported; supported: {_ROPE_TYPES}"
                )
            if kind == "default":
                scaling = None
        factors = _freq_factors(cfg.get("rope_freq_factors"), head_dim)
        window = cfg.get("sliding_window")
        use_window = cfg.get("use_sliding_window", arch == "MistralForCausalLM")
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None)
        attention_bias = bool(cfg.get("attention_bias", False))
        return cls(
            architecture=arch,
            vocab_size=ints["vocab_size"],
            hidden_size=ints["hidden_size"],
            intermediate_size=ints["intermediate_size"],
            num_layers=ints["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=kv,
            head_dim=head_dim,
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            rope_scaling=dict(scaling) if scaling else None,
            rope_freq_factors=factors,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=traits["qkv_bias"] or attention_bias,
            o_bias=attention_bias and arch != "Qwen2ForCausalLM",
            qk_norm=traits["qk_norm"],
            sliding_window=int(window) if window and use_window else None,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )
