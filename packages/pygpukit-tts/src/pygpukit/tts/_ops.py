"""The operators the Kokoro network calls, by name, on host float32 arrays.

Each takes the ops package's version when it exists (``pygpukit.ops.conv1d``,
``conv_transpose1d``, ``lstm``, ``ada_in``, ``channel_layernorm``, ``snake``, ``leaky_relu``;
``pygpukit.ops.audio``'s ``stft`` / ``istft``), called on arrays uploaded from the host and
downloaded after, else the private NumPy version in :mod:`pygpukit.tts._numpy_ops`. This module
is the one place that switches the network from one to the other; :data:`BACKENDS` says which
each name uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.ops.audio.stft import istft, stft

from . import _numpy_ops as ref

__all__ = [
    "BACKENDS",
    "adain",
    "channel_layer_norm",
    "conv1d",
    "conv_transpose1d",
    "istft_polar",
    "layer_norm",
    "leaky_relu",
    "lstm_bidirectional",
    "snake",
    "stft_polar",
]

_ops = importlib.import_module("pygpukit.ops")


def _op(name: str) -> Callable[..., Any] | None:
    fn = getattr(_ops, name, None)
    return fn if callable(fn) else None


_CONV1D = _op("conv1d")
_CONV_T = _op("conv_transpose1d")
_LSTM = _op("lstm")
_ADA_IN = _op("ada_in")
_CHANNEL_LN = _op("channel_layernorm")
_SNAKE = _op("snake")
_LEAKY = _op("leaky_relu")

#: Which implementation each operator runs: ``"pygpukit.ops"`` or ``"numpy"``.
BACKENDS: dict[str, str] = {
    name: "pygpukit.ops" if fn is not None else "numpy"
    for name, fn in {
        "conv1d": _CONV1D,
        "conv_transpose1d": _CONV_T,
        "lstm_bidirectional": _LSTM,
        "adain": _ADA_IN,
        "channel_layer_norm": _CHANNEL_LN,
        "snake": _SNAKE,
        "leaky_relu": _LEAKY,
        "stft_polar": stft,
        "istft_polar": istft,
    }.items()
}
layer_norm = ref.layer_norm


def _up(a: np.ndarray | None) -> Any:
    return None if a is None else gp.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def conv1d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
) -> np.ndarray:
    """``torch.nn.functional.conv1d``: x ``[B, C_in, L]``, weight ``[C_out, C_in/groups, K]``."""
    kw = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    if _CONV1D is None:
        return ref.conv1d(x, weight, bias, **kw)
    return np.asarray(_CONV1D(_up(x), _up(weight), _up(bias), **kw).to_numpy())


def conv_transpose1d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    groups: int = 1,
) -> np.ndarray:
    """``torch.nn.functional.conv_transpose1d``: weight ``[C_in, C_out/groups, K]``."""
    kw = {"stride": stride, "padding": padding, "output_padding": output_padding, "groups": groups}
    if _CONV_T is None:
        return ref.conv_transpose1d(x, weight, bias, **kw)
    return np.asarray(_CONV_T(_up(x), _up(weight), _up(bias), **kw).to_numpy())


def lstm_bidirectional(x: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """A one-layer bidirectional ``torch.nn.LSTM`` (batch_first): ``[B, T, I] -> [B, T, 2H]``."""
    if _LSTM is None:
        return ref.lstm_bidirectional(x, params)
    out, _ = _LSTM(
        _up(x),
        _up(params["weight_ih_l0"]),
        _up(params["weight_hh_l0"]),
        _up(params["bias_ih_l0"]),
        _up(params["bias_hh_l0"]),
        w_ih_reverse=_up(params["weight_ih_l0_reverse"]),
        w_hh_reverse=_up(params["weight_hh_l0_reverse"]),
        b_ih_reverse=_up(params["bias_ih_l0_reverse"]),
        b_hh_reverse=_up(params["bias_hh_l0_reverse"]),
    )
    return np.asarray(out.to_numpy())


def adain(
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float = 1e-5,
    norm_weight: np.ndarray | None = None,
    norm_bias: np.ndarray | None = None,
) -> np.ndarray:
    """Adaptive instance norm ``(1 + gamma) * instance_norm(x) + beta``; gamma/beta ``[B, C]``."""
    if _ADA_IN is None:
        return ref.adain(x, gamma, beta, eps, norm_weight, norm_bias)
    y = _ADA_IN(
        _up(x), _up(gamma), _up(beta), weight=_up(norm_weight), bias=_up(norm_bias), eps=eps
    )
    return np.asarray(y.to_numpy())


def channel_layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5
) -> np.ndarray:
    """LayerNorm over the channel axis of ``[B, C, L]``."""
    if _CHANNEL_LN is None:
        return ref.channel_layer_norm(x, gamma, beta, eps)
    return np.asarray(_CHANNEL_LN(_up(x), _up(gamma), _up(beta), eps).to_numpy())


def snake(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Snake activation ``x + sin(alpha x)^2 / alpha``, alpha ``[1, C, 1]``."""
    if _SNAKE is None:
        return ref.snake(x, alpha)
    return np.asarray(_SNAKE(_up(x), _up(alpha.reshape(-1))).to_numpy())


def leaky_relu(x: np.ndarray, negative_slope: float = 0.01) -> np.ndarray:
    """``max(x, 0) + negative_slope * min(x, 0)``."""
    if _LEAKY is None:
        return ref.leaky_relu(x, negative_slope)
    return np.asarray(_LEAKY(_up(x), negative_slope).to_numpy())


def stft_polar(x: np.ndarray, n_fft: int, hop_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Magnitude and phase ``[B, n_fft // 2 + 1, frames]`` of ``torch.stft``.

    Centered, reflect-padded, periodic Hann window.
    """
    magnitude, phase = stft(_up(x), n_fft, hop_length, output="polar")
    return magnitude.to_numpy(), phase.to_numpy()


def istft_polar(
    magnitude: np.ndarray, phase: np.ndarray, n_fft: int, hop_length: int
) -> np.ndarray:
    """``torch.istft(magnitude * exp(1j * phase))`` (centered, periodic Hann): ``[B, samples]``."""
    out = istft(_up(magnitude), n_fft, hop_length, phase=_up(phase))
    return np.asarray(out.to_numpy())
