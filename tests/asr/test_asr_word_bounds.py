"""Word spans narrowed to the voice (pygpukit.asr.whisper.word_bounds) on synthetic bursts of
noise between silences: a span running over a pause shrinks to the burst it mostly covers,
short gaps inside a word are bridged, silent or noise-only spans are left alone."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit.asr.whisper.word_bounds import Loudness, tighten_words

SR = 16000


def _bursts(rng, seconds: float, spans: list[tuple[float, float]], floor: float = 0.0):
    wave = (rng.standard_normal(int(seconds * SR)) * floor).astype(np.float32)
    for a, b in spans:
        wave[int(a * SR) : int(b * SR)] += rng.uniform(0.05, 0.3) * rng.standard_normal(
            int(b * SR) - int(a * SR)
        ).astype(np.float32)
    return wave


def _word(start: float, end: float) -> dict[str, float | str]:
    return {"word": "w", "start": start, "end": end}


def test_spans_over_pauses_shrink_to_their_burst(rng):
    wave = _bursts(rng, 10.0, [(1.5, 2.0), (2.0, 2.6), (5.3, 5.5), (6.0, 7.2)])
    loud = Loudness(wave, 0.0, 10.0)
    # First word after leading silence; last word before a pause whose span reaches the next
    # onset (a 0.2 s burst at 5.3 is shorter than the word's 0.6 s); a word over the next one.
    got = tighten_words([_word(0.0, 2.0), _word(2.0, 5.4), _word(5.4, 7.2)], loud)
    assert got[0]["start"] == pytest.approx(1.5, abs=0.011) and got[0]["end"] == 2.0
    assert got[1]["start"] == 2.0 and got[1]["end"] == pytest.approx(2.6, abs=0.011)
    assert got[2]["start"] == pytest.approx(6.0, abs=0.011) and got[2]["end"] == 7.2


def test_short_gaps_inside_a_word_are_bridged(rng):
    wave = _bursts(rng, 4.0, [(1.0, 1.3), (1.4, 1.8)])  # a 0.1 s closure inside the word
    got = tighten_words([_word(0.5, 3.0)], Loudness(wave, 0.0, 4.0))
    assert got[0]["start"] == pytest.approx(1.0, abs=0.011)
    assert got[0]["end"] == pytest.approx(1.8, abs=0.011)


def test_words_without_voice_keep_their_span(rng):
    wave = _bursts(rng, 6.0, [(4.0, 5.0)])
    silent = tighten_words([_word(0.5, 2.5)], Loudness(wave, 0.0, 6.0))
    assert (silent[0]["start"], silent[0]["end"]) == (0.5, 2.5)
    # Steady noise as loud as the speech everywhere: every frame is voiced, nothing moves.
    noise = (rng.standard_normal(6 * SR) * 0.1).astype(np.float32)
    kept = tighten_words([_word(0.5, 2.5)], Loudness(noise, 0.0, 6.0))
    assert (kept[0]["start"], kept[0]["end"]) == (0.5, 2.5)


def test_window_offset_and_a_short_recording(rng):
    wave = _bursts(rng, 33.0, [(31.2, 32.0)])
    loud = Loudness(wave, 30.0, 60.0)  # the last window runs past the samples
    got = tighten_words([_word(30.0, 33.0)], loud)
    assert type(got[0]["start"]) is float and got[0]["start"] == pytest.approx(31.2, abs=0.011)
    assert got[0]["end"] == pytest.approx(32.0, abs=0.011)
