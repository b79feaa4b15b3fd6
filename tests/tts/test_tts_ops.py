"""The building blocks of the device-resident Kokoro network against float64 definitions:
AdaIN over the valid steps of a padded batch, the harmonic sine source, the packed style
projections, and the whole network against the NumPy reference network."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kokoro_numpy_reference import ReferenceNetwork

import pygpukit as gp
from pygpukit.tts._masking import Lengths, ada_in
from pygpukit.tts._source import HARMONICS, harmonic_sines, merged_source
from pygpukit.tts._weights import DeviceWeights
from pygpukit.tts.kokoro import KokoroNetwork, _upload_ids
from pygpukit.tts.random_model import TINY_CONFIG, random_state, random_voice


def _up(a):
    return gp.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


@pytest.mark.parametrize("activation", [None, "leaky_relu", "snake"])
def test_masked_ada_in_matches_each_utterance_alone(rand, activation):
    b, c, width = 3, 5, 17
    lengths = np.array([17, 9, 4])
    x, h = rand((b, c, width)), rand((b, 2 * c))
    w, bias, alpha = rand((c,)), rand((c,)), np.abs(rand((c,))) + 0.5
    x[1, :, 9:] = 100.0  # garbage in the padding must not reach the statistics
    got = ada_in(
        _up(x), _up(h)[:, :c], _up(h)[:, c:], Lengths(lengths, width), weight=_up(w),
        bias=_up(bias), activation=activation, alpha=_up(alpha) if activation == "snake" else None,
    ).to_numpy()  # fmt: skip
    for i, n in enumerate(lengths):
        xd = x[i, :, :n].astype(np.float64)
        y = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5)
        y = (1 + h[i, :c, None]) * (y * w[:, None] + bias[:, None]) + h[i, c:, None]
        if activation == "leaky_relu":
            y = np.where(y >= 0, y, 0.2 * y)
        elif activation == "snake":
            y = y + np.sin(alpha[:, None] * y) ** 2 / alpha[:, None]
        np.testing.assert_allclose(got[i, :, :n], y, rtol=1e-4, atol=1e-4)
        assert not got[i, :, n:].any()  # zero padding, ready for a convolution


def test_full_lengths_take_the_fused_kernel(rand):
    x = rand((2, 4, 6))
    lengths = Lengths(np.array([6, 6]), 6)
    assert lengths.full and lengths.for_lstm() is None
    assert lengths.zero_padding(_up(x)).to_numpy().tolist() == x.tolist()
    up = lengths.scaled(10, 1)
    assert up.width == 61 and up.lengths.tolist() == [61, 61]


def _sines_by_definition(f0: np.ndarray, up: int, sr: int) -> np.ndarray:
    """KModel's SineGen without noise, step by step in float64: repeat, wrap, downsample
    (linear, align_corners False), cumsum, upsample the phase, sin."""
    f0_up = np.repeat(f0.astype(np.float64), up, axis=-1)[:, :, None]
    rad = (f0_up * np.arange(1, HARMONICS + 1) / sr) % 1.0  # [B, L, H]

    def interpolate(x, scale):
        length = x.shape[-1]
        out_len = math.floor(length * scale)
        src = np.maximum((np.arange(out_len) + 0.5) / scale - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), length - 1)
        i1 = np.minimum(i0 + 1, length - 1)
        w = src - i0
        return x[..., i0] * (1 - w) + x[..., i1] * w

    rad_frames = interpolate(rad.transpose(0, 2, 1), 1.0 / up)
    phase = np.cumsum(rad_frames, axis=-1) * 2 * np.pi
    phase = interpolate(phase * up, float(up))
    uv = (f0_up > 10.0).transpose(0, 2, 1)
    return np.sin(phase) * 0.1 * uv


@pytest.mark.parametrize("up", [300, 20, 15])
def test_harmonic_sines_match_the_definition(up):
    rng = np.random.default_rng()
    f0 = rng.uniform(60.0, 400.0, (2, 37)).astype(np.float32)
    f0[0, 5:9] = 0.0  # an unvoiced stretch
    got = harmonic_sines(_up(f0), up, 24000, None).to_numpy()
    want = _sines_by_definition(f0, up, 24000)
    assert got.shape == want.shape == (2, HARMONICS, 37 * up)
    np.testing.assert_allclose(got, want, atol=2e-4)


@pytest.mark.parametrize("up", [300, 20, 15])
def test_merged_source_is_the_merged_definition(up):
    rng = np.random.default_rng()
    f0 = rng.uniform(60.0, 400.0, (3, 29)).astype(np.float32)
    f0[1, 3:11] = 0.0  # an unvoiced stretch: tanh(bias) there
    w, bias = rng.normal(size=(1, HARMONICS)), rng.normal(size=1)
    got = merged_source(_up(f0), up, 24000, _up(w), _up(bias)).to_numpy()
    want = np.tanh(np.einsum("h,bhl->bl", w[0], _sines_by_definition(f0, up, 24000)) + bias[0])
    assert got.shape == want.shape == (3, 29 * up)
    np.testing.assert_allclose(got, want, atol=5e-4)
    assert np.allclose(got[1, 3 * up + up : 11 * up - up], np.tanh(bias[0]), atol=1e-6)


def test_harmonic_source_op_errors():
    from pygpukit.ops.harmonic_source import harmonic_source

    t, f0, w, b = _up(np.ones((1, 9, 5))), _up(np.ones((1, 4))), _up(np.ones(9)), _up(np.ones(1))
    with pytest.raises(ValueError, match="9 values"):
        harmonic_source(t, t, f0, _up(np.ones(8)), b, up=3)
    with pytest.raises(ValueError, match="one value"):
        harmonic_source(t, t, f0, w, _up(np.ones(2)), up=3)
    with pytest.raises(ValueError, match="up"):
        harmonic_source(t, t, f0, w, b, up=0)
    with pytest.raises(ValueError):
        harmonic_source(t, t, _up(np.ones((1, 5))), w, b, up=3)


def test_harmonic_noise_is_seeded_and_scaled():
    f0 = np.zeros((1, 8), np.float32)
    f0[0, 4:] = 200.0
    a = harmonic_sines(_up(f0), 20, 24000, np.random.default_rng(5)).to_numpy()
    b = harmonic_sines(_up(f0), 20, 24000, np.random.default_rng(5)).to_numpy()
    np.testing.assert_array_equal(a, b)
    clean = harmonic_sines(_up(f0), 20, 24000, None).to_numpy()
    noise = a - clean
    assert 0.02 < noise[:, :, :80].std() < 0.05  # unvoiced: 0.1 / 3
    assert 0.001 < noise[:, :, 80:].std() < 0.006  # voiced: 0.003


def test_style_pack_columns_are_each_projection():
    state = random_state(TINY_CONFIG, seed=int(np.random.default_rng().integers(1 << 20)))
    weights = DeviceWeights(state)
    style = np.random.default_rng().standard_normal((2, TINY_CONFIG.style_dim))
    for section, pack in weights.styles.items():
        h = (style @ pack.weight.to_numpy().T + pack.bias.to_numpy()).astype(np.float32)
        assert pack.columns and all(p.startswith(section) for p in pack.columns)
        for prefix, (offset, channels) in pack.columns.items():
            want = style @ state[prefix + ".fc.weight"].T + state[prefix + ".fc.bias"]
            np.testing.assert_allclose(h[:, offset : offset + 2 * channels], want, rtol=1e-4,
                                       atol=1e-5)  # fmt: skip


def test_network_matches_the_numpy_reference():
    """The float32 network (asked for by name: the GPU's default vocoder is bfloat16, checked
    against its own limit below) within float32 rounding of the float32 NumPy network."""
    seed = int(np.random.default_rng().integers(1 << 20))
    state = random_state(TINY_CONFIG, seed=seed)
    voice = random_voice(TINY_CONFIG, seed=seed + 1)
    ids = np.array([0, *np.random.default_rng(seed).integers(1, 150, 23), 0])
    net = KokoroNetwork(TINY_CONFIG, state, vocoder_dtype="float32")
    ours = net(ids, voice[22, 0], 1.0)
    ref = ReferenceNetwork(TINY_CONFIG, state)(ids, voice[22, 0], 1.0)
    assert (ours.durations == ref.durations).mean() >= 0.95
    if not np.array_equal(ours.durations, ref.durations):
        ours = net(ids, voice[22, 0], 1.0, durations=ref.durations)
    scale = np.abs(ref.audio).max()
    np.testing.assert_allclose(ours.audio, ref.audio, atol=1e-4 * scale)


@pytest.mark.parametrize(("dtype", "limit"), [("bfloat16", 0.15), ("float16", 0.03)])
def test_16_bit_vocoder_stays_close_to_the_reference(dtype, limit):
    """The decoder and generator in 16 bits (the GPU's default is bfloat16): the prosody half
    stays float32, so the durations are the same, and the audio is close."""
    seed = int(np.random.default_rng().integers(1 << 20))
    state = random_state(TINY_CONFIG, seed=seed)
    voice = random_voice(TINY_CONFIG, seed=seed + 1)
    ids = np.array([0, *np.random.default_rng(seed).integers(1, 150, 23), 0])
    net = KokoroNetwork(TINY_CONFIG, state, vocoder_dtype=dtype)
    assert net.weights["decoder.generator.conv_post.weight"].dtype == np.dtype(dtype)
    ours = net(ids, voice[22, 0], 1.0)
    ref = KokoroNetwork(TINY_CONFIG, state, vocoder_dtype="float32")(ids, voice[22, 0], 1.0)
    np.testing.assert_array_equal(ours.durations, ref.durations)
    assert np.linalg.norm(ours.audio - ref.audio) <= limit * np.linalg.norm(ref.audio)


def test_vocoder_dtype_is_checked():
    with pytest.raises(ValueError, match="vocoder_dtype"):
        KokoroNetwork(TINY_CONFIG, random_state(TINY_CONFIG, seed=1), vocoder_dtype="int8")


def test_durations_from_given_bert_features():
    """``bert_features`` replaces ALBERT and its projection: the network's own give its own
    durations; a perturbed copy moves them; a wrong shape is refused."""
    seed = int(np.random.default_rng().integers(1 << 20))
    state = random_state(TINY_CONFIG, seed=seed)
    style = random_voice(TINY_CONFIG, seed=seed + 1)[22, 0]
    ids = np.array([0, *np.random.default_rng(seed).integers(1, 150, 23), 0])
    net = KokoroNetwork(TINY_CONFIG, state, vocoder_dtype="float32")
    d, want = net.predict_durations(ids, style, 1.0)
    t = len(ids)
    tokens = Lengths(np.array([t]), t)
    own = net._linear(net.albert(_upload_ids([ids], t), tokens), "bert_encoder").to_numpy()[0]
    d_given, got = net.predict_durations(ids, style, 1.0, bert_features=own)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(d_given.to_numpy(), d.to_numpy())
    moved, _ = net.predict_durations(ids, style, 1.0, bert_features=own[::-1].copy())
    assert not np.allclose(moved.to_numpy(), d.to_numpy())
    with pytest.raises(ValueError, match="bert_features"):
        net.predict_durations(ids, style, 1.0, bert_features=own[:-1])
