"""The length buckets of Kokoro's CUDA graphs, on the CPU backend (same padded work, no capture).

A bucket pads the tokens and frames; the result must be the unpadded one up to rounding, the
signal's ends included (the source STFT and the iSTFT end at each row's own length). The GPU
side (capture, replay, reuse) is ``tests/tts/gpu/test_gpu_tts_graphs.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from leak_checks import module_level_arrays

import pygpukit as gp
from pygpukit.ops.audio.stft import istft, stft
from pygpukit.tts import _graphs
from pygpukit.tts._edges import padded_istft, padded_stft
from pygpukit.tts._graphs import MIN_STEP, bucket, token_bucket
from pygpukit.tts._masking import Lengths
from pygpukit.tts.kokoro import KokoroNetwork
from pygpukit.tts.random_model import TINY_CONFIG, random_state, random_voice


def test_bucket_pads_less_than_a_sixteenth_or_one_step():
    sizes = [bucket(n) for n in range(1, 3000)]
    assert sizes == sorted(sizes)
    for n, b in zip(range(1, 3000), sizes, strict=True):
        assert 0 <= b - n < max(MIN_STEP, n / 16)
    assert len(set(sizes)) < 150  # a few graphs cover every length
    assert bucket(500, limit=512) == 512 and bucket(509, limit=510) == 510
    assert bucket(511, limit=510) == 511  # never below the length
    ids = [np.zeros(n, np.int64) for n in (150, 152)]
    assert token_bucket(ids, 512) == 160
    assert token_bucket(ids * 8, 512) is None  # 16 x 160 tokens: the GPU sets the pace


def _lengths(valid: list[int], width: int, on_device: bool) -> Lengths:
    host = np.array(valid)
    return Lengths(host, width, device=gp.from_numpy(host) if on_device else None)


@pytest.mark.parametrize("on_device", [False, True])
def test_padded_stft_reflects_each_row_at_its_own_end(rand, on_device):
    n_fft, hop, width = 20, 5, 160
    valid = [width, 97, 45]
    signal = rand((len(valid), width))  # the padding holds values: they must not be read
    magnitude, phase = padded_stft(gp.from_numpy(signal), _lengths(valid, width, on_device),
                                   n_fft, hop)  # fmt: skip
    got = magnitude.to_numpy() * np.exp(1j * phase.to_numpy())
    for i, n in enumerate(valid):
        m, p = stft(gp.from_numpy(signal[i, :n]), n_fft, hop, output="polar")
        want = m.to_numpy() * np.exp(1j * p.to_numpy())
        frames = want.shape[-1]
        np.testing.assert_allclose(got[i, :, :frames], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("on_device", [False, True])
def test_padded_istft_ends_each_row_at_its_own_end(rand, on_device):
    n_fft, hop, frames = 20, 5, 33
    bins = n_fft // 2 + 1
    valid_frames = [frames, 20, 9]
    magnitude = np.abs(rand((len(valid_frames), bins, frames))) + 0.1
    phase = rand((len(valid_frames), bins, frames)) * 3.0
    for i, n in enumerate(valid_frames):
        magnitude[i, :, n:] = 0  # what the generator leaves past each end
    valid = [(n - 1) * hop for n in valid_frames]
    samples = _lengths(valid, (frames - 1) * hop, on_device)
    got = padded_istft(gp.from_numpy(magnitude), gp.from_numpy(phase), samples, n_fft, hop)
    got = got.to_numpy()
    for i, n in enumerate(valid_frames):
        alone = istft(gp.from_numpy(magnitude[i, :, :n].copy()), n_fft, hop,
                      phase=gp.from_numpy(phase[i, :, :n].copy())).to_numpy()  # fmt: skip
        np.testing.assert_allclose(got[i, : valid[i]], alone, rtol=1e-5, atol=1e-6)


def test_bucketed_network_equals_the_unpadded_one():
    """The graphs' padded inputs (device lengths, masks on) give each utterance's own audio."""
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 20))
    state = random_state(TINY_CONFIG, seed=seed)
    style = random_voice(TINY_CONFIG, seed=seed + 1)[12, 0]
    ids = np.array([0, *rng.integers(1, 170, 11), 0])  # 13 tokens: padded to 16
    plain = KokoroNetwork(TINY_CONFIG, state, cuda_graphs=False)(ids, style, 1.0)
    net = KokoroNetwork(TINY_CONFIG, state, cuda_graphs=True)
    padded = net(ids, style, 1.0)
    assert net.graphs is not None
    assert list(net.graphs.phonemes.entries) == [(1, 16)]
    frames = int(plain.durations.sum())
    assert list(net.graphs.frames.entries) == [(1, bucket(frames))]
    np.testing.assert_array_equal(padded.durations, plain.durations)
    assert len(padded.audio) == len(plain.audio) == frames * TINY_CONFIG.frame_samples
    assert np.linalg.norm(padded.audio - plain.audio) <= 1e-5 * np.linalg.norm(plain.audio)


def test_big_batches_run_eagerly_unpadded(monkeypatch):
    """Past the graph limits a half runs eagerly at the batch's own width: the same audio."""
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 20))
    state = random_state(TINY_CONFIG, seed=seed)
    style = random_voice(TINY_CONFIG, seed=seed + 1)[8, 0]
    ids = np.array([0, *rng.integers(1, 170, 7), 0])
    plain = KokoroNetwork(TINY_CONFIG, state, cuda_graphs=False)(ids, style, 1.0)
    net = KokoroNetwork(TINY_CONFIG, state, cuda_graphs=True)
    assert net.graphs is not None
    monkeypatch.setattr(_graphs, "MAX_GRAPH_FRAMES", 8)
    frames_eager = net(ids, style, 1.0)
    assert len(net.graphs.phonemes.entries) == 1 and not net.graphs.frames.entries
    monkeypatch.setattr(_graphs, "MAX_GRAPH_TOKENS", 8)
    all_eager = net(ids, style, 1.0)
    assert net.graphs.phonemes.eager == 1  # the second call did not reach the graphs
    for got in (frames_eager, all_eager):
        np.testing.assert_array_equal(got.durations, plain.durations)
        assert np.linalg.norm(got.audio - plain.audio) <= 1e-5 * np.linalg.norm(plain.audio)


def test_a_synthesis_keeps_no_array_at_module_level():
    """Its constants (harmonic numbers, the iSTFT's end correction) live with the network."""
    rng = np.random.default_rng()
    seed = int(rng.integers(1 << 20))
    net = KokoroNetwork(TINY_CONFIG, random_state(TINY_CONFIG, seed=seed), cuda_graphs=False)
    style = random_voice(TINY_CONFIG, seed=seed + 1)[6, 0]
    out = net(np.array([0, *rng.integers(1, 170, 6), 0]), style, 1.0)
    assert out.audio.size > 0 and np.abs(out.audio).max() > 0
    assert module_level_arrays() == []
