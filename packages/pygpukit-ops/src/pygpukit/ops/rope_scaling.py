"""RoPE frequency scaling for long contexts: ``linear``, ``llama3`` and ``yarn``, as in HF configs.

:func:`rope_inv_freq` turns a ``rope_scaling`` dict of a Hugging Face ``config.json`` into the
per-pair inverse frequencies (and, for YaRN, the factor the cos/sin tables are multiplied by);
:func:`pygpukit.ops.rope_cos_sin` takes both (``inv_freq=``, ``attention_factor=``). Host-side
NumPy in float64, once per model: the tables are built at load, never per token.

- ``linear``: every frequency divided by ``factor`` (position interpolation).
- ``llama3``: low frequencies (wavelength above ``original_max_position_embeddings /
  low_freq_factor``) divided by ``factor``, high ones (below ``... / high_freq_factor``) kept,
  the band between blended linearly in ``original / wavelength``.
- ``yarn``: extrapolated and interpolated frequencies blended by a ramp between the dimensions
  rotating ``beta_fast`` and ``beta_slow`` times over the original context; tables scaled by
  ``attention_factor`` (default ``0.1 ln(factor) + 1``, or the ``mscale``/``mscale_all_dim``
  ratio). With ``original_max_position_embeddings`` given, the factor is
  ``max_position_embeddings / original_max_position_embeddings``, as transformers computes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["ROPE_SCALING_TYPES", "rope_inv_freq"]

#: The ``rope_type`` values :func:`rope_inv_freq` understands (``default`` = no scaling).
ROPE_SCALING_TYPES = ("default", "linear", "llama3", "yarn")


def _number(scaling: Mapping[str, Any], key: str, default: float | None = None) -> float:
    value = scaling.get(key, default)
    if value is None:
        raise ValueError(f"rope_scaling needs {key!r} for rope_type {scaling.get('rope_type')!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"rope_scaling[{key!r}] must be a finite number, got {value!r}")
    return float(value)


def _llama3(inv: np.ndarray, scaling: Mapping[str, Any]) -> np.ndarray:
    factor = _number(scaling, "factor")
    low, high = _number(scaling, "low_freq_factor"), _number(scaling, "high_freq_factor")
    old = _number(scaling, "original_max_position_embeddings")
    if high <= low:
        raise ValueError(
            f"rope_scaling needs high_freq_factor > low_freq_factor, got {high}, {low}"
        )
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return np.where(medium, blended, scaled)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(
    rotary_dim: int, base: float, scaling: Mapping[str, Any], max_positions: int | None
) -> tuple[np.ndarray, float]:
    factor = _number(scaling, "factor")
    original = scaling.get("original_max_position_embeddings")
    if original is not None and max_positions is not None:
        factor = max_positions / _number(scaling, "original_max_position_embeddings")
    elif original is None:
        if max_positions is None:
            raise ValueError("yarn scaling needs original_max_position_embeddings")
        original = max_positions
    original = _number({"o": original}, "o")
    attention = scaling.get("attention_factor")
    mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if attention is None:
        if mscale and mscale_all:
            attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
        else:
            attention = _yarn_mscale(factor)
    fast = _number(scaling, "beta_fast") if scaling.get("beta_fast") else 32.0
    slow = _number(scaling, "beta_slow") if scaling.get("beta_slow") else 1.0

    def correction_dim(rotations: float) -> float:
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = correction_dim(fast), correction_dim(slow)
    if scaling.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, rotary_dim - 1)
    if lo == hi:
        hi += 0.001  # a zero-width ramp would divide by zero
    ramp = np.clip((np.arange(rotary_dim // 2, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)
    extrapolation = 1.0 - ramp  # 1 where the original frequency is kept
    pos_freqs = base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, float(attention)


def rope_inv_freq(
    rotary_dim: int,
    base: float = 10000.0,
    scaling: Mapping[str, Any] | None = None,
    *,
    max_position_embeddings: int | None = None,
) -> tuple[np.ndarray, float]:
    """``(inv_freq, attention_factor)`` of ``rotary_dim`` dims, ``base`` and HF ``rope_scaling``.

    ``inv_freq`` is float64 ``[rotary_dim // 2]``; ``attention_factor`` multiplies the cos/sin
    tables (1.0 except for YaRN). ``scaling`` is ``None`` or a dict with ``rope_type`` (or the
    older ``type``) one of :data:`ROPE_SCALING_TYPES` and that type's keys;
    ``max_position_embeddings`` is the model's (YaRN uses it). Raises ``ValueError`` for an
    unknown type or a missing or non-numeric key.
    """
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, (int, np.integer)):
        raise TypeError(f"rotary_dim must be an int, got {type(rotary_dim).__name__}")
    if rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be a positive even number, got {rotary_dim}")
    if not np.isfinite(base) or base <= 0:
        raise ValueError(f"base must be a positive number, got {base!r}")
    inv = 1.0 / base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    if not scaling:
        return inv, 1.0
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind not in ROPE_SCALING_TYPES:
        raise ValueError(f"rope_type {kind!r} is not supported; supported: {ROPE_SCALING_TYPES}")
    if kind == "linear":
        return inv / _number(scaling, "factor"), 1.0
    if kind == "llama3":
        return _llama3(inv, scaling), 1.0
    if kind == "yarn":
        return _yarn(int(rotary_dim), float(base), scaling, max_position_embeddings)
    return inv, 1.0
