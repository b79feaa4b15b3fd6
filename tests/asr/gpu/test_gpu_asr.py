"""Whisper on the GPU: real tiny.en (float16 words, float32 ids against transformers), the CUDA
graph decode against eager steps, batched windows against one at a time, and a 10-minute
long-form recording built from the synthesized sentences with silences between them."""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest
from asr_clips import long_recording, sentences, speech
from asr_long_form import check_long_form
from asr_reference_configs import CONFIGS

import pygpukit as gp
from pygpukit import asr
from pygpukit.asr.random_model import write_checkpoint

pytestmark = pytest.mark.gpu

REFERENCE = pathlib.Path(__file__).parent.parent / "references" / "tiny_en_greedy.json"
NAMES = ["fox", "stella", "weather"]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


@pytest.fixture(scope="module")
def tiny16(tiny_en_dir):
    return asr.load(tiny_en_dir, dtype="float16")


@pytest.fixture(scope="module")
def tiny32(tiny_en_dir):
    return asr.load(tiny_en_dir, dtype="float32")


@pytest.mark.parametrize("name", NAMES)
def test_gpu_tiny_en_float16_hears_the_words(tiny16, name):
    spoken = _words(sentences()[name])
    heard = set(_words(tiny16.transcribe(speech(name)).text))
    assert sum(w in heard for w in spoken) >= 0.75 * len(spoken)


def test_gpu_tiny_en_ids_match_transformers(tiny32):
    if not REFERENCE.is_file():
        pytest.skip("no reference ids: run tools/asr_reference.py --whisper-dir ...")
    ref = json.loads(REFERENCE.read_text())
    for name in NAMES:
        got = tiny32.transcribe(speech(name), without_timestamps=True, temperature=0.0)
        assert [t for s in got.segments for t in s.tokens] == ref[name], name


def test_gpu_graph_steps_equal_eager_steps(tiny32):
    windows = tiny32._windows
    a = tiny32.transcribe(speech("stella"), temperature=0.0)
    windows.use_graphs = False
    try:
        b = tiny32.transcribe(speech("stella"), temperature=0.0)
    finally:
        windows.use_graphs = True
    assert [s.tokens for s in a.segments] == [s.tokens for s in b.segments]


def test_gpu_generate_follows_transcribe(tiny32):
    r = tiny32.transcribe(speech("fox"), without_timestamps=True, temperature=0.0)
    tokens = [t for s in r.segments for t in s.tokens]
    from pygpukit.asr.whisper.audio import log_mel_spectrogram

    mel = (
        log_mel_spectrogram(speech("fox"), 80, padding=480000)[:, :3000].copy().reshape(1, 80, 3000)
    )
    tok = tiny32.tokenizer
    ids = tiny32.generate(mel, [[tok.sot, tok.no_timestamps]], len(tokens))
    assert ids[0].tolist() == tokens


def test_gpu_batched_windows_equal_single_windows(tmp_path, rng):
    seed, cfg, _ = CONFIGS["multilingual_small"]
    model = asr.load(write_checkpoint(tmp_path / "m", cfg, seed), dtype="float32")
    mel = rng.uniform(-1, 1.5, (8, cfg.n_mels, 3000)).astype(np.float32)
    prompt = rng.integers(0, cfg.vocab_size, (8, 3))
    batched = model.generate(mel, prompt.tolist(), 12)
    for i in range(8):
        one = model.generate(mel[i : i + 1], prompt[i : i + 1].tolist(), 12)
        assert np.array_equal(one[0], batched[i]), i


def test_gpu_large_v3_shape_float16_close_to_float32(tmp_path, rng):
    seed, cfg, _ = CONFIGS["large_v3_shape"]
    folder = write_checkpoint(tmp_path / "m", cfg, seed)
    mel = rng.uniform(-1, 1.5, (1, cfg.n_mels, 3000)).astype(np.float32)
    ids = [rng.integers(0, cfg.vocab_size, 5).tolist()]
    ref = asr.load(folder, dtype="float32").logits(mel, ids)
    gp.memory.empty_cache()
    got = asr.load(folder, dtype="float16").logits(mel, ids)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 2e-2


@pytest.mark.parametrize("condition", [True, False])
def test_gpu_long_form_ten_minutes(tiny16, rng, condition):
    """Ten minutes of eleven synthesized sentences in random order with 1-6 s silences
    (asr_clips.long_recording): no repetition loop, segments in order and inside the audio, most
    sentences heard at their place, and word timestamps within 0.3 s of where the synthesizer's
    voice starts and stops."""
    audio, placed = long_recording(600.0, rng)
    result = tiny16.transcribe(audio, condition_on_previous_text=condition, word_timestamps=True)
    check_long_form(result, audio.size / 16000, placed)
