"""Float64 NumPy references shared by the ops tests on the CPU and on the GPU.

The CPU tests (``tests/ops/test_*.py``) and the GPU tests (``tests/ops/gpu/test_gpu_*.py``)
check pygpukit.ops against these functions. They are written independently of the ops'
own code (``pygpukit.ops``'s NumPy path included) and compute in float64; the tolerances
stay in the test modules. Not a test module (no ``test_`` prefix), and no fixtures here:
``tests/ops/conftest.py`` only puts this folder on ``sys.path`` for ``tests/ops/gpu``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

# ----------------------------------------------------------------------------- error measure


def rel_err(out: ArrayLike, ref: ArrayLike) -> float:
    """Relative error ``||out - ref|| / ||ref||`` (Frobenius norms), both taken in float64."""
    o, r = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(o - r) / np.linalg.norm(r))


# ----------------------------------------------------------------------------- layer ops


def rms_ref(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis: ``x / sqrt(mean(x^2) + eps) * w``."""
    x64 = x.astype(np.float64)
    return x64 / np.sqrt(np.mean(x64**2, axis=-1, keepdims=True) + eps) * w.astype(np.float64)


def ln_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
    """LayerNorm over the last axis (variance of the centred values), then ``* w (+ b)``."""
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x64 - mu) / np.sqrt(var + eps) * w.astype(np.float64)
    return y + b.astype(np.float64) if b is not None else y


def softmax_ref(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the row maximum."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def gated_ref(x: np.ndarray, act: str) -> np.ndarray:
    """``act(gate) * up`` of ``x = [gate | up]`` (halves of the last axis).

    ``act``: ``"silu"``, ``"tanh"`` (GELU's tanh approximation) or anything else for the
    exact GELU (``math.erf`` per element).
    """
    x64 = x.astype(np.float64)
    d = x.shape[-1] // 2
    g, u = x64[..., :d], x64[..., d:]
    if act == "silu":
        a = g / (1.0 + np.exp(-g))
    elif act == "tanh":
        a = 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g**3)))
    else:
        a = 0.5 * g * (1.0 + np.vectorize(math.erf)(g / math.sqrt(2.0)))
    return a * u


def rope_ref(
    x: np.ndarray, pos: np.ndarray, rotary_dim: int, layout: str, base: float = 10000.0
) -> np.ndarray:
    """Rotate every pair of ``x`` [..., heads, D] by complex multiplication, in float64.

    ``layout`` ``"neox"`` pairs dim i with i + rotary_dim/2, anything else (GPT-J) pairs
    2i with 2i+1; dims from ``rotary_dim`` on pass through. Independent of the kernels'
    pairing code, which uses cos/sin tables.
    """
    x64 = x.astype(np.float64)
    y = x64.copy()
    half = rotary_dim // 2
    freqs = base ** (-np.arange(half, dtype=np.float64) * 2 / rotary_dim)
    rot = np.exp(1j * pos.astype(np.float64)[..., None] * freqs)[..., None, :]  # [..., 1, half]
    if layout == "neox":
        z = (x64[..., :half] + 1j * x64[..., half:rotary_dim]) * rot
        y[..., :half], y[..., half:rotary_dim] = z.real, z.imag
    else:
        z = (x64[..., 0:rotary_dim:2] + 1j * x64[..., 1:rotary_dim:2]) * rot
        y[..., 0:rotary_dim:2], y[..., 1:rotary_dim:2] = z.real, z.imag
    return y


# ----------------------------------------------------------------------------- linear


def act_ref(y: np.ndarray, activation: str | None) -> np.ndarray:
    """The linear epilogue's activations on float64 ``y`` (``math.erf`` per element for GELU).

    Raises AssertionError for a name the ops do not define, so a new activation cannot be
    checked against the identity by accident.
    """
    if activation is None:
        return y
    if activation == "relu":
        return np.where(y > 0, y, 0.0)
    if activation == "gelu":
        erf = np.array([math.erf(v / math.sqrt(2.0)) for v in y.ravel()]).reshape(y.shape)
        return y * 0.5 * (1.0 + erf)
    if activation == "gelu_tanh":
        return 0.5 * y * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (y + 0.044715 * y**3)))
    if activation == "silu":
        return y * (1.0 / (1.0 + np.exp(-y)))
    raise AssertionError(activation)


def linear_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, activation: str | None
) -> np.ndarray:
    """``act(x @ w.T + b)`` for x [..., K] (or [K]) and w [N, K]."""
    y = x.astype(np.float64) @ w.astype(np.float64).T
    if b is not None:
        y = y + b.astype(np.float64)
    return act_ref(y, activation)


# ----------------------------------------------------------------------------- sampling


def probs_ref(
    logits: np.ndarray,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    penalty: float = 1.0,
    prev: list[int] | None = None,
) -> np.ndarray:
    """Float64 reference distribution of one row (Hugging Face's order of filters)."""
    x = logits.astype(np.float64).copy()
    if prev:
        ids = np.unique(prev)
        x[ids] = np.where(x[ids] > 0, x[ids] / penalty, x[ids] * penalty)
    x = x / temperature
    order = np.argsort(-x, kind="stable")
    keep = np.zeros(x.size, dtype=bool)
    keep[order[: top_k if 0 < top_k < x.size else x.size]] = True
    if top_p < 1.0:
        kept = order[keep[order]]
        q = np.exp(x[kept] - x[kept[0]])
        cum = np.cumsum(q / q.sum())
        n = int(np.searchsorted(cum, top_p, side="left")) + 1
        keep[:] = False
        keep[kept[:n]] = True
    p = np.where(keep, np.exp(x - x.max()), 0.0)
    if min_p > 0.0:
        p[p < min_p * p.max()] = 0.0
    return p / p.sum()


def chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's chi-square statistic of observed ``counts`` against the distribution ``probs``."""
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


# ----------------------------------------------------------------------------- attention


def visible(sq: int, sk: int) -> np.ndarray:
    """[Sq, Sk] bool, bottom-right causal: key j visible to query i when j <= i + Sk - Sq."""
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)


def ref_sdpa(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> np.ndarray:
    """Scaled dot-product attention of q [B, Hq, Sq, D] over k, v [B, Hkv, Sk, D].

    KV heads are repeated for GQA; ``mask`` is additive and broadcasts to [B, Hq, Sq, Sk];
    ``causal`` follows :func:`visible`; rows that see no key (all -inf) are zeros.
    """
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if mask is not None:
        s = s + np.asarray(mask, np.float64)
    if causal:
        s = np.where(visible(q.shape[2], k.shape[2]), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = p.sum(axis=-1, keepdims=True)
    p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    return np.einsum("bhqk,bhkd->bhqd", p, v)


def ref_decode(
    q: ArrayLike,
    keys: Sequence[ArrayLike],
    vals: Sequence[ArrayLike],
    scale: float | None = None,
) -> np.ndarray:
    """One decode step: q [B, Hq, D] over keys[b], vals[b] [Hkv, n_b, D]; zeros where n_b == 0."""
    q = np.asarray(q, np.float64)
    b_, hq, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = np.zeros(q.shape)
    for b in range(b_):
        kb, vb = np.asarray(keys[b], np.float64), np.asarray(vals[b], np.float64)
        if kb.shape[1] == 0:
            continue
        group = hq // kb.shape[0]
        kb, vb = np.repeat(kb, group, axis=0), np.repeat(vb, group, axis=0)
        s = np.einsum("hd,hnd->hn", q[b], kb) * scale
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        out[b] = np.einsum("hn,hnd->hd", p / p.sum(axis=-1, keepdims=True), vb)
    return out


def gather_pages(cache: np.ndarray, table: np.ndarray, lens: np.ndarray) -> list[np.ndarray]:
    """Each sequence's rows [Hkv, n_b, D] of a paged cache [blocks, Hkv, block_size, D].

    Sequence b's blocks are ``table[b]`` in order; n_b is ``lens[b]``, clamped to the
    capacity ``table.shape[1] * block_size``.
    """
    hkv, d = cache.shape[1], cache.shape[3]
    return [
        cache[table[i]].transpose(1, 0, 2, 3).reshape(hkv, -1, d)[:, : int(lens[i])]
        for i in range(len(table))
    ]


def qkv(
    rand: Callable[..., np.ndarray],
    b: int,
    hq: int,
    hkv: int,
    sq: int,
    sk: int,
    d: int,
    dtype: DTypeLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] from the ``rand`` fixture, in ``dtype``.

    q and k are scaled by 0.3 so the softmax is neither one-hot nor flat.
    """
    q = (rand((b, hq, sq, d)) * 0.3).astype(dtype)
    k = (rand((b, hkv, sk, d)) * 0.3).astype(dtype)
    v = rand((b, hkv, sk, d)).astype(dtype)
    return q, k, v


# ----------------------------------------------------------------------------- KV cache writes


def kv_append_ref(
    k_cache: np.ndarray, v_cache: np.ndarray, k: np.ndarray, v: np.ndarray, positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Copies of the caches [B, Hkv, max_len, D] after appending k, v [B, Hkv, T, D].

    ``positions`` [B]: sequence b's tokens go to positions[b] + j; [B, T]: token j of
    sequence b goes to positions[b, j]. Positions outside [0, max_len) are skipped.
    """
    want_k, want_v = k_cache.copy(), v_cache.copy()
    b_, _, t, _ = k.shape
    max_len = k_cache.shape[2]
    per_token = positions.ndim == 2
    for i in range(b_):
        for j in range(t):
            p = int(positions[i, j]) if per_token else int(positions[i]) + j
            if 0 <= p < max_len:
                want_k[i, :, p], want_v[i, :, p] = k[i, :, j], v[i, :, j]
    return want_k, want_v


def paged_write_ref(
    k_cache: np.ndarray, v_cache: np.ndarray, k: np.ndarray, v: np.ndarray, slots: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Copies of the paged caches [blocks, Hkv, block_size, D] after writing k, v [N, Hkv, D].

    Token i goes to slot ``slots[i]`` (block slot // block_size, row slot % block_size);
    slots outside [0, blocks * block_size) are skipped.
    """
    want_k, want_v = k_cache.copy(), v_cache.copy()
    nblocks, _, bs, _ = k_cache.shape
    for i, s in enumerate(slots):
        if 0 <= s < nblocks * bs:
            want_k[s // bs, :, s % bs], want_v[s // bs, :, s % bs] = k[i], v[i]
    return want_k, want_v
