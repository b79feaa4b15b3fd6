"""Multilingual decoding paths on a small random multilingual model (tiny.en's vocabulary file
supplies the language tokens): language detection, the language and task tokens, translation,
and an unknown language code."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from asr_clips import speech
from asr_reference_configs import CONFIGS

from pygpukit import asr
from pygpukit.asr.random_model import write_checkpoint


@pytest.fixture(scope="module")
def multilingual(tiny_en_dir, tmp_path_factory):
    seed, cfg, _ = CONFIGS["multilingual_small"]
    folder = write_checkpoint(tmp_path_factory.mktemp("ml"), cfg, seed)
    shutil.copy(tiny_en_dir / "tokenizer.json", folder / "tokenizer.json")
    return asr.load(folder, dtype="float32")


def test_detect_language_gives_a_distribution(multilingual, rng):
    mel = rng.uniform(-1, 1.5, (80, 3000)).astype(np.float32)
    code, probs = multilingual.detect_language(mel)
    assert code in multilingual.tokenizer.languages and len(probs) >= 90
    assert abs(sum(probs.values()) - 1.0) < 1e-6 and probs[code] == max(probs.values())


def test_language_and_task_tokens_lead_the_prompt(multilingual):
    tok = multilingual.tokenizer
    result = multilingual.transcribe(speech("fox")[:16000], language="de", task="translate",
                                     temperature=0.0, max_new_tokens=4)  # fmt: skip
    assert result.language == "de"
    from pygpukit.asr.whisper.decoding import sot_sequence

    assert sot_sequence(tok, True, "de", "translate") == [
        tok.sot,
        tok.languages["de"],
        tok.translate,
    ]
    detected = multilingual.transcribe(speech("fox")[:16000], temperature=0.0,
                                       without_timestamps=True, max_new_tokens=4)  # fmt: skip
    assert detected.language in tok.languages


def test_unknown_language_code_lists_the_known_ones(multilingual):
    with pytest.raises(asr.UnsupportedModelError, match=r"known codes: .*en"):
        multilingual.transcribe(speech("fox"), language="xx")
