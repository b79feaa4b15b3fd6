"""ops.decode_argmax (the head GEMV, argmax and the step's bookkeeping in one launch) on the
current backend (the CPU here, CUDA on a GPU): against decode_linear's float32 logits, argmax
and decode_advance, on fresh random data with vocabularies that are not a multiple of a block's
rows."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops

Rand = Callable[..., np.ndarray]


def up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(a))


def head(rand: Rand, n: int, k: int, dtype: str) -> gp.GPUArray:
    return up((rand((n, k)) / np.sqrt(k)).astype(dtype))


def _unfused(x, w, nw) -> tuple[np.ndarray, int]:
    logits = ops.decode_linear(x, w, norm_weight=nw, out_dtype=gp.float32)
    token = ops.argmax(logits.reshape(1, -1)).to_numpy()[0]
    return logits.to_numpy().reshape(-1), int(token)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("n", "k"), [(37, 64), (3001, 136), (20011, 96)])
@pytest.mark.parametrize("norm", [False, True])
def test_token_and_logits_are_argmax_of_decode_linear(rand: Rand, dtype, n, k, norm):
    x, w = up(rand((1, k), dtype)), head(rand, n, k, dtype)
    nw = up(rand((k,), dtype)) if norm else None
    logits = gp.zeros((1, n), gp.float32)
    out = gp.full((1,), -5, gp.int32)
    got = ops.decode_argmax(x, w, out=out, norm_weight=nw, logits=logits)
    want_logits, want = _unfused(x, w, nw)
    assert got is out and int(out.to_numpy()[0]) == want
    np.testing.assert_array_equal(logits.to_numpy().reshape(-1), want_logits)


def test_ties_go_to_the_lowest_row_and_negative_logits_order(rand: Rand):
    """Equal top logits pick the first; all-negative logits pick the least negative."""
    dt, n, k = "bfloat16", 777, 64
    xs = (np.abs(rand((k,))) + 0.25).astype(dt)
    w = -np.abs(rand((n, k))).astype(dt)
    w[300] = w[612] = -0.01  # the two least negative rows, equal: the first one wins
    out = gp.zeros((1,), gp.int32)
    ops.decode_argmax(up(xs), up(w), out=out)
    assert int(out.to_numpy()[0]) == 300
    _, want = _unfused(up(xs), up(w), None)
    assert want == 300


def test_advance_and_a_second_call_with_a_smaller_maximum(rng, rand: Rand):
    """The state advances as decode_advance does; the kernel's running maximum starts afresh."""
    dt, n, k, cap = "bfloat16", 1000, 64, 16
    x, w, nw = up(rand((k,), dt)), head(rand, n, k, dt), up(rand((k,), dt))
    history0 = rng.integers(0, n, 12).astype(np.int32)
    token, pos = up(np.array([7], np.int32)), up(np.array([4], np.int32))
    lens, history = up(np.array([0], np.int32)), up(history0)
    out = gp.zeros((1,), gp.int32)
    state = ops.SequenceState(token, pos, lens, history, cap)
    bound = ops.bind_decode_argmax(x, w, out=out, norm_weight=nw, advance=state)
    bound()
    _, first = _unfused(x, w, nw)
    assert int(out.to_numpy()[0]) == first == int(token.to_numpy()[0])
    assert int(pos.to_numpy()[0]) == 5 and int(lens.to_numpy()[0]) == 6
    want = history0.copy()
    want[5] = first
    np.testing.assert_array_equal(history.to_numpy(), want)
    x[...] = (x.to_numpy().astype(np.float32) * 0.01).astype(dt)  # every logit far smaller
    w_host = w.to_numpy()
    w_host[first] = -w_host[first]  # and the old winner loses
    w[...] = w_host
    bound()
    _, second = _unfused(x, w, nw)
    assert second != first and int(out.to_numpy()[0]) == second
    assert int(pos.to_numpy()[0]) == 6 and int(history.to_numpy()[6]) == second


def test_argument_errors(rand: Rand):
    dt = "bfloat16"
    x, w = up(rand((64,), dt)), head(rand, 40, 64, dt)
    out = gp.zeros((1,), gp.int32)
    with pytest.raises(TypeError):
        ops.decode_argmax(x, w, out=gp.zeros((1,), gp.float32))
    with pytest.raises(ValueError, match="one int32"):
        ops.decode_argmax(x, w, out=gp.zeros((2,), gp.int32))
    with pytest.raises(ValueError, match="40 float32 logits"):
        ops.decode_argmax(x, w, out=out, logits=gp.zeros((39,), gp.float32))
    with pytest.raises(ValueError, match="features"):
        ops.decode_argmax(up(rand((32,), dt)), w, out=out)
    with pytest.raises(ValueError, match="one row"):
        ops.decode_argmax(up(rand((2, 64), dt)), w, out=out)
