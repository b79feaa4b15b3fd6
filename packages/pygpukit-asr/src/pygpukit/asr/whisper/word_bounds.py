"""Word timestamps tightened to the voice in the samples.

The cross-attention alignment (:mod:`.alignment`) gives each word the span from its first
token's start to the next token's start. Across a pause that span takes the silence in: the
first word after a pause starts where the previous word (or the window) ended, the last word
before one ends where the next word (or the window) begins, sometimes past the next sentence's
onset. openai-whisper caps such words at twice the median word length; here the samples decide
instead. In each word's span (already clipped into its segment) the 10 ms frames whose loudness
reaches the window's speech level minus 30 dB count as voiced; voiced frames less than 0.2 s
apart form runs (the pause between sentences is longer, the closure of a stop consonant
shorter); the word becomes its longest run (its own sound, rather than a neighbour's edge that
the span caught). A word with no voiced frame (whispered, or noise above the level everywhere)
keeps its span; nothing ever moves outside the aligned span.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .config import SAMPLE_RATE

__all__ = ["Loudness", "tighten_words"]

#: Loudness frames, in samples (10 ms).
FRAME = SAMPLE_RATE // 100
FRAMES_PER_SECOND = SAMPLE_RATE / FRAME
#: A frame counts as voiced from this far below the window's speech level (its 95th percentile).
RELATIVE_LEVEL = 10.0 ** (-30.0 / 20.0)
#: ... and never below this RMS (full scale 1), so dither and near-silence are not voice.
ABSOLUTE_LEVEL = 1e-4
#: Unvoiced frames that split a word's span into separate runs (0.2 s).
GAP_FRAMES = 20


class Loudness:
    """Which 10 ms frames of one window ``[start, end)`` seconds of ``wave`` are voiced."""

    def __init__(self, wave: np.ndarray, start: float, end: float) -> None:
        a = max(0, round(start * SAMPLE_RATE))
        b = min(wave.size, round(end * SAMPLE_RATE))
        n = max(0, (b - a) // FRAME)
        frames = np.asarray(wave[a : a + n * FRAME], np.float64).reshape(n, FRAME)
        rms = np.sqrt((frames**2).mean(axis=1)) if n else np.zeros(0)
        level = float(np.percentile(rms, 95)) if n else 0.0
        self.start = a / SAMPLE_RATE
        self.voiced = rms >= max(level * RELATIVE_LEVEL, ABSOLUTE_LEVEL)

    def longest_run(self, start: float, end: float) -> tuple[float, float] | None:
        """The longest run of voiced frames in ``[start, end]`` seconds, clipped to that span.

        Gaps under 0.2 s are bridged; None when no frame there is voiced.
        """
        a = max(0, int(np.floor((start - self.start) * FRAMES_PER_SECOND)))
        b = min(self.voiced.size, int(np.ceil((end - self.start) * FRAMES_PER_SECOND)))
        hits = np.nonzero(self.voiced[a:b])[0]
        if hits.size == 0:
            return None
        breaks = np.nonzero(np.diff(hits) > GAP_FRAMES)[0]
        firsts = np.concatenate([[0], breaks + 1])
        lasts = np.concatenate([breaks, [hits.size - 1]])
        k = int(np.argmax(hits[lasts] - hits[firsts]))
        lo = self.start + (a + hits[firsts[k]]) / FRAMES_PER_SECOND
        hi = self.start + (a + hits[lasts[k]] + 1) / FRAMES_PER_SECOND
        return max(start, float(lo)), min(end, float(hi))


def tighten_words(
    words: Sequence[dict[str, float | str]], loudness: Loudness
) -> list[dict[str, float | str]]:
    """``words`` with each ``start`` / ``end`` narrowed to its longest voiced run.

    See the module doc; words without a voiced frame are kept as they are.
    """
    out: list[dict[str, float | str]] = []
    for w in words:
        s, e = float(w["start"]), float(w["end"])
        run = loudness.longest_run(s, e) if e > s else None
        if run is not None and run[1] > run[0]:
            s, e = run
        out.append({**w, "start": round(s, 3), "end": round(e, 3)})
    return out
