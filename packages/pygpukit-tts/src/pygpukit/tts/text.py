"""Text to Kokoro phonemes, phonemes to token ids, and chunking of long input.

Kokoro reads phonemes of its own alphabet (:func:`pygpukit.tts.config.default_vocab`). Text is
converted by ``misaki`` (the G2P Kokoro was trained with; ``pip install "pygpukit-tts[g2p]"``)
when it is installed, else by the ``espeak-ng`` program when it is on ``PATH`` (IPA output with
symbols outside the vocabulary dropped: lower quality), else :class:`G2PUnavailableError`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable

import numpy as np

from .errors import G2PUnavailableError, PhonemeError

__all__ = ["as_token_array", "chunk_phonemes", "find_g2p", "phonemes_to_ids", "text_to_phonemes"]

_SENTENCE_END = re.compile(r"(?<=[.!?…])\s*")
_CLAUSE_END = re.compile(r"(?<=[,;:—])\s*")
_PUNCTUATION = re.compile(r"([.,!?;:—…]+)")
# espeak-ng's IPA spellings that Kokoro writes differently.
_ESPEAK_FIXES = (("ɚ", "əɹ"), ("r", "ɹ"), ("ɐ", "ə"), ("͡", ""), ("ʲ", ""), ("\n", " "))


def phonemes_to_ids(phonemes: str, vocab: dict[str, int]) -> list[int]:
    """Token ids of a phoneme string; :class:`PhonemeError` names any unknown symbol."""
    unknown = sorted({c for c in phonemes if c not in vocab})
    if unknown:
        raise PhonemeError(
            f"phoneme symbols {unknown!r} are not in Kokoro's vocabulary of {len(vocab)} "
            "symbols; pass text instead, or phonemes from misaki"
        )
    return [vocab[c] for c in phonemes]


def _misaki(lang: str) -> Callable[[str], str] | None:
    try:
        from misaki import en
    except ImportError:
        return None
    if not lang.startswith("en"):
        return None
    g2p = en.G2P(trf=False, british=lang in ("en-gb", "b"), fallback=None)

    def convert(text: str) -> str:
        phonemes, _ = g2p(text)
        return str(phonemes)

    return convert


def _espeak(lang: str, vocab: dict[str, int]) -> Callable[[str], str] | None:
    program = shutil.which("espeak-ng")
    if program is None:
        return None

    def phonemize(segment: str) -> str:
        try:
            done = subprocess.run(
                [program, "-q", "--ipa", "-v", lang, "--stdin"],
                input=segment,
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            raise G2PUnavailableError(f"espeak-ng failed on the text: {exc}") from exc
        ipa = done.stdout
        for old, new in _ESPEAK_FIXES:
            ipa = ipa.replace(old, new)
        ipa = re.sub(r"\s+", " ", ipa).strip()
        return "".join(c for c in ipa if c in vocab)

    def convert(text: str) -> str:
        # espeak-ng drops punctuation, which Kokoro uses for pauses and intonation: phonemize
        # the text between punctuation marks and put the marks back.
        out = []
        for piece in _PUNCTUATION.split(text):
            if not piece.strip():
                continue
            if _PUNCTUATION.fullmatch(piece):
                out.append("".join(c for c in piece if c in vocab))
            else:
                out.append(phonemize(piece))
        return re.sub(r"\s+([.,!?;:—…])", r"\1", " ".join(out)).strip()

    return convert


def find_g2p(lang: str, vocab: dict[str, int]) -> Callable[[str], str] | None:
    """The best installed converter for ``lang`` (misaki, then espeak-ng), or None."""
    return _misaki(lang) or _espeak(lang, vocab)


def text_to_phonemes(text: str, vocab: dict[str, int], lang: str = "en-us") -> str:
    """Kokoro phonemes of ``text``; raises :class:`G2PUnavailableError` without a converter."""
    if not text or not text.strip():
        raise PhonemeError("the text is empty; pass words to speak")
    g2p = find_g2p(lang, vocab)
    if g2p is None:
        raise G2PUnavailableError(
            "text needs a grapheme-to-phoneme converter: pip install 'pygpukit-tts[g2p]' "
            "(misaki), or install the espeak-ng program; or pass phonemes= directly"
        )
    phonemes = g2p(text).strip()
    if not phonemes:
        raise PhonemeError(f"the text {text[:40]!r} gave no phonemes Kokoro can speak")
    return phonemes


def _split(pieces: list[str], pattern: re.Pattern[str], limit: int) -> list[str]:
    out: list[str] = []
    for piece in pieces:
        if len(piece) <= limit:
            out.append(piece)
        else:
            out.extend(p for p in pattern.split(piece) if p)
    return out


def _hard_split(piece: str, limit: int) -> list[str]:
    if len(piece) <= limit:
        return [piece]
    words = piece.split(" ")
    out, cur = [], ""
    for word in words:
        while len(word) > limit:  # a single "word" longer than the limit: cut it
            if cur:
                out.append(cur)
                cur = ""
            out.append(word[:limit])
            word = word[limit:]
        candidate = f"{cur} {word}" if cur else word
        if len(candidate) <= limit:
            cur = candidate
        else:
            out.append(cur)
            cur = word
    if cur:
        out.append(cur)
    return out


def chunk_phonemes(phonemes: str, limit: int = 510, *, first_limit: int | None = None) -> list[str]:
    """Split a phoneme string into chunks of at most ``limit`` symbols.

    Cuts at sentence ends first, then at clause punctuation, then between words; pieces are
    packed greedily so chunks stay as long as the limit allows. ``first_limit`` caps the first
    chunk lower (a stream's first audio comes sooner), cut the same way.
    """
    if first_limit is not None and first_limit < limit:
        text = phonemes.strip()
        if len(text) <= first_limit:
            return [text] if text else []
        first = chunk_phonemes(text, first_limit)[0]
        # The first chunk is a prefix of the text up to spaces: skip its symbols.
        seen, cut = 0, 0
        want = len(first.replace(" ", ""))
        while seen < want:
            seen += text[cut] != " "
            cut += 1
        return [first, *chunk_phonemes(text[cut:], limit)]
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    text = phonemes.strip()
    if len(text) <= limit:
        return [text] if text else []
    pieces = [p for p in _SENTENCE_END.split(text) if p]
    pieces = _split(pieces, _CLAUSE_END, limit)
    pieces = [h for p in pieces for h in _hard_split(p, limit)]
    chunks: list[str] = []
    cur = ""
    for piece in pieces:
        candidate = f"{cur} {piece}" if cur else piece
        if len(candidate) <= limit:
            cur = candidate
        else:
            chunks.append(cur)
            cur = piece
    if cur:
        chunks.append(cur)
    return [c.strip() for c in chunks if c.strip()]


def as_token_array(ids: list[int]) -> np.ndarray:
    """Ids framed by the padding token 0 at both ends, as KModel expects."""
    return np.array([0, *ids, 0], dtype=np.int64)
