"""Int8ActivationNetwork on the GPU: through the CUDA graphs (device lengths, a padded bucket)
as eagerly (random weights, Kokoro-82M's prosody shape)."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit.tts import KokoroConfig
from pygpukit.tts.int8_activations import Int8ActivationNetwork
from pygpukit.tts.random_model import random_state, random_voice

pytestmark = pytest.mark.gpu

# Kokoro-82M's phoneme half (ALBERT, prosody) with a small vocoder: the rounding's sites at
# their real sizes, a short run.
SHAPE = KokoroConfig(upsample_initial_channel=32)


def test_gpu_graph_replay_equals_the_eager_run():
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 20))
    state = random_state(SHAPE, seed=seed)
    style = random_voice(SHAPE, seed=seed + 1)[40, 0]
    graphs = Int8ActivationNetwork(SHAPE, state, vocoder_dtype="float32", cuda_graphs=True)
    eager = Int8ActivationNetwork(SHAPE, state, vocoder_dtype="float32", cuda_graphs=False)
    for n in (41, 37):  # one bucket: the second call replays the first one's graph
        ids = np.array([0, *rng.integers(1, 170, n), 0])
        got, want = graphs(ids, style, 1.0), eager(ids, style, 1.0)
        # The bucket's padding moves float rounding only: a duration on a rounding boundary may
        # flip, nothing more (a padded step inside a rounding range would move many).
        assert (got.durations == want.durations).mean() >= 0.95
        if np.array_equal(got.durations, want.durations):
            err = np.linalg.norm(got.audio - want.audio) / np.linalg.norm(want.audio)
            assert err < 1e-2
