"""The operators the Kokoro network calls (``pygpukit.tts._ops``), whichever implementation
backs each (``BACKENDS``), against naive float64 loops written from their definitions."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit.tts import _ops


def _conv1d_naive(x, w, b, stride, padding, dilation, groups):
    bsz, _, length = x.shape
    c_out, cpg, k = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding, padding)))
    l_out = (length + 2 * padding - dilation * (k - 1) - 1) // stride + 1
    out = np.zeros((bsz, c_out, l_out))
    opg = c_out // groups
    for o in range(c_out):
        g = o // opg
        for t in range(l_out):
            for c in range(cpg):
                for j in range(k):
                    out[:, o, t] += w[o, c, j] * xp[:, g * cpg + c, t * stride + j * dilation]
    return out + (0 if b is None else b[None, :, None])


def _conv_transpose1d_naive(x, w, b, stride, padding, output_padding, groups):
    bsz, c_in, length = x.shape
    _, opg, k = w.shape
    ipg = c_in // groups
    full = (length - 1) * stride + k + output_padding
    out = np.zeros((bsz, opg * groups, full))
    for c in range(c_in):
        g = c // ipg
        for o in range(opg):
            for t in range(length):
                for j in range(k):
                    out[:, g * opg + o, t * stride + j] += x[:, c, t] * w[c, o, j]
    out = out[:, :, padding : full - padding]
    return out + (0 if b is None else b[None, :, None])


@pytest.mark.parametrize(
    ("stride", "padding", "dilation", "groups"),
    [(1, 1, 1, 1), (2, 3, 1, 2), (1, 5, 3, 1), (1, 0, 1, 4)],
)
def test_conv1d(rand, stride, padding, dilation, groups):
    x, w, b = (
        rand((2, 4, 13)),
        rand((6 if groups != 4 else 4, 4 // groups, 3)),
        rand((6 if groups != 4 else 4,)),
    )
    got = _ops.conv1d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    np.testing.assert_allclose(
        got, _conv1d_naive(x, w, b, stride, padding, dilation, groups), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    ("stride", "padding", "output_padding", "groups"), [(2, 1, 1, 4), (10, 5, 0, 1), (6, 3, 0, 2)]
)
def test_conv_transpose1d(rand, stride, padding, output_padding, groups):
    x, w, b = rand((2, 4, 7)), rand((4, 2, 12 if stride > 2 else 3)), rand((2 * groups,))
    got = _ops.conv_transpose1d(
        x, w, b, stride=stride, padding=padding, output_padding=output_padding, groups=groups
    )
    want = _conv_transpose1d_naive(x, w, b, stride, padding, output_padding, groups)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_lstm_bidirectional(rand):
    i, h, t = 5, 3, 6
    x = rand((2, t, i))
    shapes = {
        "weight_ih_l0": (4 * h, i),
        "weight_hh_l0": (4 * h, h),
        "bias_ih_l0": (4 * h,),
        "bias_hh_l0": (4 * h,),
    }
    p = {n + s: rand(shape) for s in ("", "_reverse") for n, shape in shapes.items()}

    def run(suffix, steps):
        hs, cs = np.zeros((2, h)), np.zeros((2, h))
        out = np.zeros((2, t, h))
        for s in steps:
            z = x[:, s] @ p["weight_ih_l0" + suffix].T + hs @ p["weight_hh_l0" + suffix].T
            z = z + p["bias_ih_l0" + suffix] + p["bias_hh_l0" + suffix]
            ig, fg, gg, og = np.split(z, 4, axis=1)
            sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
            cs = sig(fg) * cs + sig(ig) * np.tanh(gg)
            hs = sig(og) * np.tanh(cs)
            out[:, s] = hs
        return out

    want = np.concatenate([run("", range(t)), run("_reverse", range(t - 1, -1, -1))], axis=-1)
    np.testing.assert_allclose(_ops.lstm_bidirectional(x, p), want, rtol=1e-4, atol=1e-5)


def test_norms_and_activations(rand):
    x, gamma, beta = rand((2, 5, 9)), rand((2, 5)), rand((2, 5))
    w, b = rand((5,)), rand((5,))
    xd = x.astype(np.float64)
    inorm = (xd - xd.mean(2, keepdims=True)) / np.sqrt(xd.var(2, keepdims=True) + 1e-5)
    want = (1 + gamma[:, :, None]) * (inorm * w[None, :, None] + b[None, :, None]) + beta[
        :, :, None
    ]
    np.testing.assert_allclose(_ops.adain(x, gamma, beta, 1e-5, w, b), want, rtol=1e-4, atol=1e-5)
    cnorm = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(
        _ops.channel_layer_norm(x, w, b),
        cnorm * w[None, :, None] + b[None, :, None],
        rtol=1e-4,
        atol=1e-5,
    )
    alpha = np.abs(rand((1, 5, 1))) + 0.5
    np.testing.assert_allclose(
        _ops.snake(x, alpha), xd + np.sin(alpha * xd) ** 2 / alpha, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(_ops.leaky_relu(x, 0.2), np.where(xd >= 0, xd, 0.2 * xd), rtol=1e-6)


def test_stft_istft_round_trip(rand):
    x = rand((1, 600))
    magnitude, phase = _ops.stft_polar(x, 20, 5)
    assert magnitude.shape == (1, 11, 121)
    np.testing.assert_allclose(_ops.istft_polar(magnitude, phase, 20, 5), x, rtol=1e-4, atol=1e-5)


def test_every_operator_comes_from_the_ops_package():
    """A renamed or removed ops function would silently send the network back to NumPy."""
    assert {name: "pygpukit.ops" for name in _ops.BACKENDS} == _ops.BACKENDS
