"""Streaming text out of generated ids: incremental detokenization and stop strings.

:class:`Detokenizer` turns ids into text pieces one id at a time and never emits a broken
UTF-8 sequence: a byte-level token may hold part of a character, and its text is held back
until the character is complete. :class:`StopStrings` cuts a text stream at the first user stop
string and holds back a tail that might start one, so the stop string is never emitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

__all__ = ["Detokenizer", "StopStrings"]

_REPLACEMENT = "\ufffd"


class _Decodes(Protocol):
    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = ...) -> str: ...


class Detokenizer:
    """Incremental decoding: :meth:`add` takes one id and returns the new complete text.

    Each step decodes a short window of ids (from the last emitted boundary), so spacing rules
    of the tokenizer's decoder see their context, and emits the window's new text only when it
    does not end in U+FFFD (an incomplete UTF-8 sequence). ``context`` ids (the end of the
    prompt) are decoded for context and never emitted. :meth:`flush` returns what is left at
    the end.
    """

    def __init__(
        self,
        tokenizer: _Decodes,
        *,
        skip_special_tokens: bool = True,
        context: Iterable[int] = (),
    ) -> None:
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = [int(i) for i in context]
        self._prefix = 0  # window start: ids before it are decoded and emitted
        self._read = len(self._ids)  # ids before this are emitted
        self._text: list[str] = []

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip)

    def add(self, token_id: int) -> str:
        """Append one id; the text it completes (may be empty)."""
        self._ids.append(int(token_id))
        done = self._decode(self._ids[self._prefix : self._read])
        window = self._decode(self._ids[self._prefix :])
        if len(window) <= len(done) or window.endswith(_REPLACEMENT):
            return ""
        piece = window[len(done) :]
        self._prefix, self._read = self._read, len(self._ids)
        self._text.append(piece)
        return piece

    def extend(self, ids: Iterable[int]) -> str:
        """:meth:`add` each id; the concatenated new text."""
        return "".join(self.add(i) for i in ids)

    def flush(self) -> str:
        """The text of ids still held back (an incomplete character decodes as U+FFFD)."""
        done = self._decode(self._ids[self._prefix : self._read])
        window = self._decode(self._ids[self._prefix :])
        piece = window[len(done) :] if len(window) > len(done) else ""
        self._prefix = self._read = len(self._ids)
        self._text.append(piece)
        return piece

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return "".join(self._text)


class StopStrings:
    """Cuts a stream of text pieces at the first of ``stops``, never emitting the stop string.

    :meth:`feed` returns ``(text to emit, stopped)``. Text that could be the start of a stop
    string is held back until it cannot; :meth:`flush` releases it at the end of a stream that
    did not stop. A stop string may span several pieces.
    """

    def __init__(self, stops: Iterable[str] | str | None) -> None:
        if isinstance(stops, str):
            stops = [stops]
        self.stops = tuple(s for s in (stops or ()) if s)
        if any(not isinstance(s, str) for s in self.stops):
            raise TypeError(f"stop strings must be str, got {stops!r}")
        self._buffer = ""
        self.stopped = False
        #: The stop string that matched, or None.
        self.matched: str | None = None

    def feed(self, piece: str) -> tuple[str, bool]:
        """Add a piece of text; the text that is now safe to emit, and whether it stopped."""
        if self.stopped:
            return "", True
        if not self.stops:
            return piece, False
        self._buffer += piece
        first = None
        for s in self.stops:
            i = self._buffer.find(s)
            if i >= 0 and (first is None or i < first[0]):
                first = (i, s)
        if first is not None:
            out = self._buffer[: first[0]]
            self._buffer = ""
            self.stopped, self.matched = True, first[1]
            return out, True
        hold = self._held_tail()
        out = self._buffer[: len(self._buffer) - hold]
        self._buffer = self._buffer[len(out) :]
        return out, False

    def _held_tail(self) -> int:
        """Length of the longest buffer suffix that is a proper prefix of a stop string."""
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self._buffer)), best, -1):
                if self._buffer.endswith(s[:n]):
                    best = n
                    break
        return best

    def flush(self) -> str:
        """Release the held-back tail (the stream ended without a stop string)."""
        out, self._buffer = ("" if self.stopped else self._buffer), ""
        return out
