"""Token sampling in NumPy: the kernels' algorithm row by row (float32 values, float64 masses)."""

from __future__ import annotations

from typing import Any

import numpy as np


def argmax(logits: np.ndarray) -> np.ndarray:
    """Index of the largest logit per row (NaN as -inf, lowest index on ties), int32."""
    host = logits.astype(np.float32)
    return np.argmax(np.where(np.isnan(host), -np.inf, host), axis=1).astype(np.int32)


def _per_row(value: Any, row: int) -> Any:
    return value[row] if isinstance(value, np.ndarray) else value


def sample(
    logits: np.ndarray,
    temperature: Any,
    top_k: Any,
    top_p: Any,
    min_p: float,
    penalty: float,
    prev: np.ndarray | None,
    draws: np.ndarray,
) -> np.ndarray:
    """The sampling kernel's algorithm, row by row, in float32 values / float64 masses."""
    rows, v = logits.shape
    out = np.zeros(rows, dtype=np.int32)
    for r in range(rows):
        logit = logits[r].astype(np.float32)
        logit = np.where(np.isnan(logit), np.float32(-np.inf), logit)
        if prev is not None:
            ids = prev[r][(prev[r] >= 0) & (prev[r] < v)]
            hit = np.zeros(v, dtype=bool)
            hit[ids] = True
            pen = np.float32(penalty)
            logit = np.where(hit, np.where(logit > 0, logit / pen, logit * pen), logit)
            logit = logit.astype(np.float32)
        temp = float(_per_row(temperature, r))
        best = int(np.argmax(logit))
        if not temp > 0.0 or logit[best] == -np.inf:
            out[r] = best
            continue
        with np.errstate(over="ignore"):
            val = (logit / np.float32(temp)).astype(np.float32)
        vmax = val[best]
        if np.isinf(vmax):  # a temperature so small the scaled logits overflow: greedy
            out[r] = best
            continue
        mass = np.exp(val.astype(np.float64) - float(vmax))
        keep = np.ones(v, dtype=bool)
        k = int(_per_row(top_k, r))
        if 0 < k < v:
            keep &= val >= np.partition(val, v - k)[v - k]
        p = float(_per_row(top_p, r))
        if p < 1.0:
            order = np.argsort(-val[keep], kind="stable")
            kept_vals, kept_mass = val[keep][order], mass[keep][order]
            cum = np.cumsum(kept_mass)
            cut = min(int(np.searchsorted(cum, max(p, 0.0) * cum[-1], side="left")), cum.size - 1)
            keep &= val >= kept_vals[cut]
        if min_p > 0.0:
            keep &= val >= np.float32(vmax + np.float32(np.log(np.float32(min_p))))
        cum = np.cumsum(np.where(keep, mass, 0.0))
        target = float(draws[r]) / 2.0**64 * cum[-1]
        pick = int(np.searchsorted(cum, target, side="right"))
        kept_idx = np.flatnonzero(keep)
        out[r] = min(pick, int(kept_idx[-1]))
        if not keep[out[r]]:  # a draw at a boundary rounding into a dropped token
            out[r] = int(kept_idx[np.searchsorted(kept_idx, out[r])])
    return out
