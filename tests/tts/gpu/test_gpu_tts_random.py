"""The device-resident Kokoro network on the GPU with random weights (no download).

Against the float32 NumPy reference network (durations and audio), at the tiny shape, at a small
shape with Kokoro-82M's vocoder rates (10 x 6 upsampling, n_fft 20, hop 5) and, for the
durations, at the real shape; padded batches against each utterance alone; the stream's first
chunk.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from kokoro_numpy_reference import ReferenceNetwork
from tts_random_inputs import SMALL_RATES, token_ids

from pygpukit.tts import KokoroConfig
from pygpukit.tts.kokoro import KokoroNetwork
from pygpukit.tts.model import FIRST_CHUNK, KokoroModel
from pygpukit.tts.random_model import TINY_CONFIG, random_state, random_voice

pytestmark = pytest.mark.gpu

# Relative L2 error of the audio against the float32 NumPy reference, by vocoder dtype.
LIMITS = {"float32": 1e-2, "float16": 3e-2, "bfloat16": 0.15}


CONFIGS = {"tiny": TINY_CONFIG, "small": SMALL_RATES}


@functools.cache
def _reference(name: str) -> tuple:
    """One random model, input and NumPy reference output per shape, shared by the dtypes."""
    config = CONFIGS[name]
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 20))
    state = random_state(config, seed=seed)
    style = random_voice(config, seed=seed + 1)[30, 0]
    ids = token_ids(rng, 29)
    return state, style, ids, ReferenceNetwork(config, state)(ids, style, 1.0)


@pytest.mark.parametrize("dtype", list(LIMITS))
@pytest.mark.parametrize("name", list(CONFIGS))
def test_gpu_network_matches_the_numpy_reference(name, dtype):
    state, style, ids, ref = _reference(name)
    gpu = KokoroNetwork(CONFIGS[name], state, vocoder_dtype=dtype)
    ours = gpu(ids, style, 1.0)
    assert (ours.durations == ref.durations).mean() >= 0.95
    if not np.array_equal(ours.durations, ref.durations):
        ours = gpu(ids, style, 1.0, durations=ref.durations)
    assert np.isfinite(ours.audio).all()
    err = np.linalg.norm(ours.audio - ref.audio) / np.linalg.norm(ref.audio)
    assert err <= LIMITS[dtype], err


def test_gpu_real_shape_durations_match_the_numpy_reference():
    config = KokoroConfig()
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 20))
    state = random_state(config, seed=seed)
    style = random_voice(config, seed=seed + 1)[150, 0]
    ids = token_ids(rng, 150)
    _, ours = KokoroNetwork(config, state).predict_durations(ids, style, 1.0)
    _, ref = ReferenceNetwork(config, state).predict_durations(ids, style, 1.0)
    assert (ours == ref).mean() >= 0.95
    assert 1.5 < ref.mean() < 4.0  # speech-like pace: the benchmark's 150 phonemes ~ 10 s


@pytest.mark.parametrize(("dtype", "limit"), [("float32", 1e-2), ("auto", 0.1)])
def test_gpu_batch_matches_each_utterance_alone(dtype, limit):
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 20))
    config = SMALL_RATES
    net = KokoroNetwork(config, random_state(config, seed=seed), vocoder_dtype=dtype)
    voice = random_voice(config, seed=seed + 1)
    ids = [token_ids(rng, n) for n in (40, 11, 27, 40)]
    refs = [voice[len(i) - 3, 0] for i in ids]
    batch = net.batch(ids, refs, 1.0)
    for i, r, got in zip(ids, refs, batch, strict=True):
        alone = net(i, r, 1.0)
        np.testing.assert_array_equal(got.durations, alone.durations)
        # Equal up to rounding (relative L2), the last frame included (the STFTs end at each
        # utterance's own end).
        assert len(got.audio) == len(alone.audio)
        err = np.linalg.norm(got.audio - alone.audio)
        assert err <= limit * np.linalg.norm(alone.audio)


def test_gpu_stream_first_chunk_is_short_and_the_rest_follows():
    config = SMALL_RATES
    model = KokoroModel(
        KokoroNetwork(config, random_state(config, seed=3)),
        {"random": random_voice(config, seed=4)},
    )
    symbols = [s for s in config.vocab if s.isalpha()]
    rng = np.random.default_rng()
    words = ["".join(rng.choice(symbols, size=4)) for _ in range(150)]
    text = ", ".join(" ".join(words[i : i + 6]) for i in range(0, 150, 6)) + "."
    parts = list(model.stream(phonemes=text, voice="random"))
    assert len(parts[0].phonemes) <= FIRST_CHUNK and len(parts) >= 3
    assert all(np.isfinite(p.samples).all() and len(p.samples) for p in parts)
