"""An independent float64 NumPy Whisper forward over Hugging Face weight names (tests only).

Written from the architecture (OpenAI's paper and model card): conv1d + GELU stem, the second
convolution with stride 2, positions added, pre-LN blocks, tied output projection.
"""

from __future__ import annotations

import math

import numpy as np


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _ln(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
    """x [C_in, L], w [C_out, C_in, 3], padding 1 -> [C_out, L_out]."""
    xp = np.pad(x, ((0, 0), (1, 1)))
    out_len = (x.shape[1] - 1) // stride + 1
    cols = np.stack([xp[:, k : k + stride * out_len : stride] for k in range(3)], axis=1)
    return np.einsum("oik,ikt->ot", w, cols) + b[:, None]


def _attn(x: np.ndarray, kv: np.ndarray, w: dict, p: str, heads: int, causal: bool) -> np.ndarray:
    def proj(name: str, src: np.ndarray) -> np.ndarray:
        y = src @ w[p + name + ".weight"].T
        return y + w[p + name + ".bias"] if p + name + ".bias" in w else y

    q, k, v = proj("q_proj", x), proj("k_proj", kv), proj("v_proj", kv)
    t, s, c = q.shape[0], k.shape[0], q.shape[1]
    d = c // heads
    q, k, v = (a.reshape(-1, heads, d).transpose(1, 0, 2) for a in (q, k, v))
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
    if causal:
        scores = scores + np.triu(np.full((t, s), -np.inf), 1)
    p_ = np.exp(scores - scores.max(-1, keepdims=True))
    p_ /= p_.sum(-1, keepdims=True)
    o = (p_ @ v).transpose(1, 0, 2).reshape(t, c)
    return o @ w[p + "out_proj.weight"].T + w[p + "out_proj.bias"]


def _mlp(x: np.ndarray, w: dict, p: str) -> np.ndarray:
    h = _gelu(x @ w[p + "fc1.weight"].T + w[p + "fc1.bias"])
    return h @ w[p + "fc2.weight"].T + w[p + "fc2.bias"]


def whisper_logits(w: dict, heads: int, layers: tuple[int, int], mel: np.ndarray,
                   ids: np.ndarray) -> np.ndarray:  # fmt: skip
    """Logits ``[S, vocab]`` of one window ``mel [n_mels, 3000]`` and tokens ``ids [S]``."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    x = _gelu(_conv(mel.astype(np.float64), w["encoder.conv1.weight"], w["encoder.conv1.bias"], 1))
    x = _gelu(_conv(x, w["encoder.conv2.weight"], w["encoder.conv2.bias"], 2)).T
    x = x + w["encoder.embed_positions.weight"][: x.shape[0]]
    for i in range(layers[0]):
        p = f"encoder.layers.{i}."
        h = _ln(x, w[p + "self_attn_layer_norm.weight"], w[p + "self_attn_layer_norm.bias"])
        x = x + _attn(h, h, w, p + "self_attn.", heads, False)
        h = _ln(x, w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"])
        x = x + _mlp(h, w, p)
    audio = _ln(x, w["encoder.layer_norm.weight"], w["encoder.layer_norm.bias"])
    y = w["decoder.embed_tokens.weight"][ids] + w["decoder.embed_positions.weight"][: len(ids)]
    for i in range(layers[1]):
        p = f"decoder.layers.{i}."
        h = _ln(y, w[p + "self_attn_layer_norm.weight"], w[p + "self_attn_layer_norm.bias"])
        y = y + _attn(h, h, w, p + "self_attn.", heads, True)
        h = _ln(y, w[p + "encoder_attn_layer_norm.weight"], w[p + "encoder_attn_layer_norm.bias"])
        y = y + _attn(h, audio, w, p + "encoder_attn.", heads, False)
        h = _ln(y, w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"])
        y = y + _mlp(h, w, p)
    y = _ln(y, w["decoder.layer_norm.weight"], w["decoder.layer_norm.bias"])
    return y @ w["decoder.embed_tokens.weight"].T
