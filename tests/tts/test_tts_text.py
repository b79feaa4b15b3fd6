"""Text to phonemes: the G2P chain (misaki, espeak-ng) and phoneme validation."""

from __future__ import annotations

import shutil

import pytest

from pygpukit import tts
from pygpukit.tts import text as text_module
from pygpukit.tts.text import phonemes_to_ids


def test_phonemes_to_ids_maps_every_symbol():
    vocab = tts.default_vocab()
    assert len(vocab) == 114 and max(vocab.values()) == 177 and 0 not in vocab.values()
    phonemes = "ðɪs ɪz kˈokəɹo."
    assert phonemes_to_ids(phonemes, vocab) == [vocab[c] for c in phonemes]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="the espeak-ng program is absent")
def test_espeak_fallback_gives_vocabulary_symbols(monkeypatch):
    monkeypatch.setattr(text_module, "_misaki", lambda lang: None)
    vocab = tts.default_vocab()
    phonemes = tts.text_to_phonemes("Hello world. This is a test.", vocab)
    assert phonemes and all(c in vocab for c in phonemes)
    assert "." in phonemes and " " in phonemes


def test_g2p_order_prefers_misaki(monkeypatch):
    monkeypatch.setattr(text_module, "_misaki", lambda lang: lambda t: "mˈɪsɑki")
    assert tts.text_to_phonemes("anything", tts.default_vocab()) == "mˈɪsɑki"
