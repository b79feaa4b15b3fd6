"""Writing a :class:`~pygpukit.asr.Transcription` as plain text, SubRip, WebVTT or JSON."""

from __future__ import annotations

import dataclasses
import json

from .whisper.transcribe import Transcription

__all__ = ["FORMATS", "render", "timestamp"]

FORMATS = ("txt", "srt", "vtt", "json")


def timestamp(seconds: float, decimal: str = ".") -> str:
    """``HH:MM:SS.mmm`` (``decimal=","`` for SubRip)."""
    ms = max(0, round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{decimal}{ms:03d}"


def render(result: Transcription, fmt: str) -> str:
    """``result`` in format ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "txt":
        return "\n".join(s.text.strip() for s in result.segments) + "\n"
    if fmt == "srt":
        blocks = [
            f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{s.text.strip()}\n"
            for i, s in enumerate(result.segments, 1)
        ]
        return "\n".join(blocks)
    if fmt == "vtt":
        cues = [f"{timestamp(s.start)} --> {timestamp(s.end)}\n{s.text.strip()}\n"
                for s in result.segments]  # fmt: skip
        return "WEBVTT\n\n" + "\n".join(cues)
    if fmt == "json":
        return json.dumps(dataclasses.asdict(result), indent=1, ensure_ascii=False) + "\n"
    raise ValueError(f"output format must be one of {', '.join(FORMATS)}, got {fmt!r}")
