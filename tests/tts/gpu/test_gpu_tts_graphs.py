"""Kokoro's CUDA graphs on the GPU (random weights): capture once per bucket, replay after.

A replay must give the audio of the eager run it was captured from, for the same utterance and
for another one of the same bucket (other lengths, same graph), and the unpadded eager
network's audio up to rounding; graphs are not captured again per call, and the least recently
used ones are dropped past the limit.
"""

from __future__ import annotations

import numpy as np
import pytest
from tts_random_inputs import SMALL_RATES, token_ids

from pygpukit.tts import KokoroConfig
from pygpukit.tts._graphs import bucket
from pygpukit.tts.kokoro import KokoroNetwork
from pygpukit.tts.random_model import random_state, random_voice

pytestmark = pytest.mark.gpu


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _assert_near_eager(
    got, eager: KokoroNetwork, ids: np.ndarray, style: np.ndarray, limit: float
) -> None:
    """The audio is the unpadded eager network's up to rounding (relative L2).

    The durations must agree; the padding moves rounding, which may flip a duration sitting on
    a rounding boundary: then the audio is compared on the same durations.

    What "up to rounding" allows depends on the model. A padded batch and an utterance alone
    run other shapes, so other conv tilings and other cuBLASLt algorithms: float32 choices are
    timed once per shape family and kept for the process, so which algorithm a shape gets
    depends on the tests that ran before (and on timing noise), and so do the float32 roundings.
    This random vocoder amplifies them (each harmonic's phase sums F0 over the whole utterance),
    by an amount that varies with the random weights and style. So the limit is ``limit`` or ten
    times the change a rounding-size nudge of the style (2**-20 relative) makes to this
    utterance's audio, whichever is larger: a padding or replay bug moves the audio far more.
    """
    want = eager(ids, style, 1.0)
    assert (got.durations == want.durations).mean() >= 0.98
    if not np.array_equal(got.durations, want.durations):
        want = eager(ids, style, 1.0, durations=got.durations)
    nudged = eager(ids, style * np.float32(1 + 2**-20), 1.0, durations=want.durations)
    sensitivity = _rel(nudged.audio, want.audio)
    err = _rel(got.audio, want.audio)
    assert err <= max(limit, 10 * sensitivity), (err, limit, sensitivity)


def _networks(
    config: KokoroConfig, dtype: str, **kw: int
) -> tuple[KokoroNetwork, KokoroNetwork, np.ndarray]:
    seed = int(np.random.default_rng().integers(1 << 20))
    state = random_state(config, seed=seed)
    graphs = KokoroNetwork(config, state, vocoder_dtype=dtype, **kw)
    eager = KokoroNetwork(config, state, vocoder_dtype=dtype, cuda_graphs=False)
    return graphs, eager, random_voice(config, seed=seed + 1)


# Relative L2 of graph replays against the unpadded eager network (other conv tilings and
# matmul algorithms at the bucket's length: rounding, which the 16-bit vocoder amplifies; the
# least limit, raised where this random model amplifies rounding more: _assert_near_eager).
LIMITS = {"float32": 1e-3, "auto": 0.1}


@pytest.mark.parametrize("dtype", list(LIMITS))
def test_gpu_replay_equals_eager(dtype):
    rng = np.random.default_rng()
    net, eager, voice = _networks(SMALL_RATES, dtype)
    assert net.graphs is not None
    first, other = token_ids(rng, 37), token_ids(rng, 34)  # 39 and 36 tokens: one bucket (48)
    style = voice[30, 0]
    captured = net(first, style, 1.0)  # eager at the bucket, then captured
    replayed = net(first, style, 1.0)
    assert net.graphs.phonemes.replays == 1 and net.graphs.phonemes.eager == 1
    np.testing.assert_array_equal(replayed.durations, captured.durations)
    assert _rel(replayed.audio, captured.audio) <= 1e-5
    _assert_near_eager(replayed, eager, first, style, LIMITS[dtype])
    # Another utterance of the same token bucket: the same phoneme graph, other lengths.
    got = net(other, voice[20, 0], 1.0)
    assert net.graphs.phonemes.replays == 2 and len(net.graphs.phonemes.entries) == 1
    _assert_near_eager(got, eager, other, voice[20, 0], LIMITS[dtype])
    assert np.isfinite(got.audio).all()


def test_gpu_batch_replay_equals_each_utterance_alone():
    rng = np.random.default_rng()
    net, eager, voice = _networks(SMALL_RATES, "float32")
    ids = [token_ids(rng, n) for n in (40, 11, 27)]
    refs = [voice[len(i) - 3, 0] for i in ids]
    for _ in range(2):  # captured, then replayed
        batch = net.batch(ids, refs, 1.0)
    assert net.graphs is not None and net.graphs.frames.replays == 1
    for i, r, got in zip(ids, refs, batch, strict=True):
        _assert_near_eager(got, eager, i, r, LIMITS["float32"])


def test_gpu_graphs_are_kept_per_bucket_and_dropped_least_recent_first():
    rng = np.random.default_rng()
    net, _, voice = _networks(SMALL_RATES, "auto", max_graphs=2)
    g = net.graphs
    assert g is not None
    lengths = (10, 40, 90)  # three token buckets: 16, 48, 96
    for n in (*lengths, lengths[-1]):
        net(token_ids(rng, n), voice[n, 0], 1.0)
    assert g.phonemes.eager == 3 and g.phonemes.replays == 1
    assert [k[1] for k in g.phonemes.entries] == [bucket(42), bucket(92)]
    assert len(g.frames.entries) <= 2
    # Speed changes the frame count only: the token graph replays.
    net(token_ids(rng, 90), voice[90, 0], 0.8)
    assert g.phonemes.replays == 2


def test_gpu_real_shape_replay_equals_eager():
    """Kokoro-82M's shape (random weights), the benchmark's 150 phonemes at batch 1.

    The bfloat16 vocoder: the replay equals the eager run it was captured from. The unpadded
    network runs its convolutions at other lengths (other tilings), whose bfloat16 rounding
    this random model amplifies by several percent, so the comparison with it is in float32.
    """
    rng = np.random.default_rng()
    ids = token_ids(rng, 150)
    net, _, voice = _networks(KokoroConfig(), "auto")
    style = voice[150, 0]
    first = net(ids, style, 1.0)
    got = net(ids, style, 1.0)
    assert net.graphs is not None and net.graphs.frames.replays == 1
    np.testing.assert_array_equal(got.durations, first.durations)
    assert _rel(got.audio, first.audio) <= 1e-6
    net, eager, voice = _networks(KokoroConfig(), "float32")
    style = voice[150, 0]
    net(ids, style, 1.0)
    got = net(ids, style, 1.0)
    assert net.graphs is not None and net.graphs.frames.replays == 1
    _assert_near_eager(got, eager, ids, style, LIMITS["float32"])
