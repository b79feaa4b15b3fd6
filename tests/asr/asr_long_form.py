"""What a long-form transcription of ``asr_clips.long_recording`` audio must satisfy."""

from __future__ import annotations

import re
from typing import Any

from asr_clips import Placed

#: Word timestamps must fall within this many seconds of the synthesizer's voice bounds.
WORD_TOLERANCE = 0.3
#: openai-whisper's threshold above which a window's text counts as a repetition loop.
MAX_COMPRESSION = 2.4


def words(text: str) -> list[str]:
    """Lower-case words of ``text``."""
    return re.findall(r"[a-z']+", text.lower())


#: Short segments allowed where no sentence was placed (see check_long_form).
MAX_STRAY = 2


def check_long_form(
    result: Any, duration: float, placed: list[Placed], share: float = 0.8,
    timed_share: float | None = None,
) -> None:  # fmt: skip
    """Assert the long-form properties of ``result`` (a ``Transcription``) of audio of
    ``duration`` seconds holding the sentences ``placed``:

    - no repetition loop: every segment's compression ratio at most 2.4, and no more words
      than 1.5 times those spoken;
    - segment timestamps increasing, each segment inside the audio and overlapping a sentence,
      except at most ``MAX_STRAY`` segments of one or two words heard in a silence;
    - at least ``share`` of the sentences heard at their place (half of their words in the
      segments over them: tiny.en mishears some synthetic words), and for ``timed_share`` of
      them (default ``share``) the first and last word heard inside a sentence's span within
      0.3 s of where the voice starts and stops.
    """
    segs = result.segments
    assert segs, "nothing transcribed"
    starts = [s.start for s in segs]
    assert starts == sorted(starts)
    stray = []
    for s in segs:
        assert 0 <= s.start < s.end <= duration + 1e-6, (s.start, s.end, duration)
        assert s.compression_ratio <= MAX_COMPRESSION, (s.compression_ratio, s.text)
        if not any(s.start < p.end + 1.0 and s.end > p.start - 1.0 for p in placed):
            stray.append((round(s.start, 2), round(s.end, 2), s.text))
    # Whisper conditioned on its previous text may hear a word in a long silence (seen on an
    # H200: " The" alone at 247.0-248.9 s of the ten-minute file); more, or longer, is a failure.
    assert len(stray) <= MAX_STRAY and all(len(words(t)) <= 2 for *_, t in stray), stray
    spoken = sum(len(words(p.text)) for p in placed)
    assert len(words(result.text)) <= 1.5 * spoken, result.text
    all_words = [w for s in segs for w in s.words]
    heard = close = 0
    for p in placed:
        over = " ".join(s.text for s in segs if s.start < p.end + 1.0 and s.end > p.start - 1.0)
        said = words(p.text)
        heard += sum(w in set(words(over)) for w in said) >= 0.5 * len(said)
        inside = [w for w in all_words if p.start - 0.5 <= w["start"] <= p.end + 0.5]
        if inside:
            close += (
                abs(inside[0]["start"] - p.onset) <= WORD_TOLERANCE
                and abs(inside[-1]["end"] - p.offset) <= WORD_TOLERANCE
            )
    seen = [(round(s.start, 2), round(s.end, 2), s.text) for s in segs]
    said_where = [(round(p.onset, 2), round(p.offset, 2), p.text) for p in placed]
    assert heard >= share * len(placed), (heard, said_where, seen)
    timed = share if timed_share is None else timed_share
    assert close >= timed * len(placed), (close, said_where, seen)
