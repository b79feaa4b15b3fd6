"""Word timestamps: the decoder's cross-attention follows the audio; a DTW path reads it.

A few cross-attention heads of Whisper's decoder (the ``alignment_heads`` of the model's
config; without them, every head of the upper half of the layers) attend to the audio frames
being spoken. The text of a window is run through the decoder once more, teacher-forced, and
those heads' attention weights ``[heads, tokens, frames]`` are read. Each head's weights are
standardized over the tokens, smoothed along time by a median filter, averaged over the heads;
the monotonic path of least cost through the negated matrix (dynamic time warping) gives each
token the frame where it starts. Words are runs of tokens (a new word at a token that starts
with a space, punctuation attached to the word before), and start and end where their first
token and the token after their last one start.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .config import SECONDS_PER_TOKEN

__all__ = ["dtw_path", "median_filter", "word_timings"]

MEDIAN_WIDTH = 7
#: Languages written without spaces: every token is a word.
_NO_SPACES = {"zh", "ja", "th", "lo", "my", "yue"}


def median_filter(x: np.ndarray, width: int = MEDIAN_WIDTH) -> np.ndarray:
    """Median over a sliding window of ``width`` (odd) along the last axis, reflect-padded."""
    half = width // 2
    if x.shape[-1] <= half:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(half, half)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.median(windows, axis=-1)


def dtw_path(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least-cost monotonic path from ``(0, 0)`` to the last cell of ``cost`` ``[N, M]``.

    Moves are one row, one column or both. Filled one anti-diagonal at a time (each cell
    depends only on the two diagonals before it), so the loop is ``N + M`` NumPy steps.
    Returns the row and column index of each step of the path.
    """
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    move = np.zeros((n + 1, m + 1), np.int8)  # 0 diagonal, 1 from above, 2 from the left
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        options = np.stack([acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]])
        best = np.argmin(options, axis=0)
        acc[i, j] = cost[i - 1, j - 1] + options[best, np.arange(i.size)]
        move[i, j] = best
    rows, cols = [], []
    i, j = n, m
    while i > 0 and j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        step = move[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    return np.array(rows[::-1]), np.array(cols[::-1])


def _words(pieces: Sequence[str], language: str) -> list[tuple[str, int, int]]:
    """``(word, first token, end token)`` runs of the token texts ``pieces``."""
    words: list[tuple[str, int, int]] = []
    for k, piece in enumerate(pieces):
        if words and language not in _NO_SPACES and not piece.startswith(" "):
            text, first, _ = words[-1]
            words[-1] = (text + piece, first, k + 1)  # a word piece or punctuation
        else:
            words.append((piece, k, k + 1))
    return [(w.strip(), a, b) for w, a, b in words if w.strip()]


def word_timings(
    weights: np.ndarray, pieces: Sequence[str], frames: int, offset: float, language: str
) -> list[tuple[dict[str, float | str], int]]:
    """Words with ``start``/``end`` (seconds, from ``offset``) for one window's text.

    Each comes with the index of its first token.

    ``weights`` ``[heads, len(pieces) + 1, audio positions]`` are the alignment heads'
    attention of the positions that predict each text token (the one before the first text
    token, then each text token); ``frames`` the window's speech length in encoder positions.
    """
    w = np.asarray(weights, np.float64)[:, :, : max(1, frames)]
    w = (w - w.mean(axis=-2, keepdims=True)) / (w.std(axis=-2, keepdims=True) + 1e-10)
    matrix = median_filter(w).mean(axis=0)
    rows, cols = dtw_path(-matrix)
    first = np.full(matrix.shape[0], -1)
    for r, c in zip(rows, cols, strict=True):
        if first[r] < 0:
            first[r] = c
    starts = first * SECONDS_PER_TOKEN
    out: list[tuple[dict[str, float | str], int]] = []
    for word, a, b in _words(pieces, language):
        start, end = offset + float(starts[a]), offset + float(starts[min(b, len(starts) - 1)])
        out.append(({"word": word, "start": round(start, 3), "end": round(end, 3)}, a))
    return out
