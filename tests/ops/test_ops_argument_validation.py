"""Argument validation of the ops package, one class of argument at a time.

Each class (read-only outputs, ...) lists its cases; every case must raise the named typed
error, naming the argument, before anything is enqueued or written. Runs on whichever backend
is active (CPU here, CUDA on the GPU machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops
from pygpukit.errors import ReadOnlyArrayError

Rand = Callable[..., np.ndarray]


def _a(rand: Rand, shape: tuple[int, ...], dtype: Any = gp.float16) -> gp.GPUArray:
    return gp.from_numpy(rand(shape).astype(np.dtype(dtype)))


def _frozen(rand: Rand, shape: tuple[int, ...], dtype: Any = gp.float16) -> gp.GPUArray:
    x = _a(rand, shape, dtype)
    x.setflags(write=False)
    return x


def _ids(values: Any, dtype: Any = np.int32) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(np.asarray(values, dtype=dtype)))


# --- read-only arrays: every op that writes into a caller's array -----------------------------
READ_ONLY_WRITES: dict[str, tuple[Callable[[Rand], Any], str]] = {
    "rmsnorm out": (
        lambda r: ops.rmsnorm(_a(r, (3, 64)), _a(r, (64,)), out=_frozen(r, (3, 64))),
        "out",
    ),
    "silu_mul out": (
        lambda r: ops.silu_mul(_a(r, (2, 64)), out=_frozen(r, (2, 32))),
        "out",
    ),
    "softmax out": (
        lambda r: ops.softmax(_a(r, (2, 16)), out=_frozen(r, (2, 16))),
        "out",
    ),
    "embedding out": (
        lambda r: ops.embedding(_ids([1, 2]), _a(r, (4, 8)), out=_frozen(r, (2, 8))),
        "out",
    ),
    "gemv out": (
        lambda r: ops.gemv(_a(r, (1, 32)), _a(r, (16, 32)), out=_frozen(r, (1, 16))),
        "out",
    ),
    "sdpa out": (
        lambda r: ops.scaled_dot_product_attention(
            _a(r, (1, 2, 4, 64)),
            _a(r, (1, 2, 4, 64)),
            _a(r, (1, 2, 4, 64)),
            out=_frozen(r, (1, 2, 4, 64)),
        ),
        "out",
    ),
    "rope inplace q": (
        lambda r: ops.apply_rope(
            _frozen(r, (3, 2, 64)),
            _a(r, (3, 1, 64)),
            *ops.rope_cos_sin(8, 64),
            _ids([0, 1, 2]),
            inplace=True,
        ),
        "q",
    ),
    "kv_cache_append cache": (
        lambda r: ops.kv_cache_append(
            _a(r, (1, 1, 2, 64)),
            _a(r, (1, 1, 2, 64)),
            _frozen(r, (1, 1, 8, 64)),
            _a(r, (1, 1, 8, 64)),
            _ids([0]),
        ),
        "k_cache",
    ),
    "paged_kv_cache_write cache": (
        lambda r: ops.paged_kv_cache_write(
            _a(r, (2, 1, 64)),
            _a(r, (2, 1, 64)),
            _a(r, (2, 1, 4, 64)),
            _frozen(r, (2, 1, 4, 64)),
            _ids([0, 5]),
        ),
        "v_cache",
    ),
}


@pytest.mark.parametrize("case", list(READ_ONLY_WRITES))
def test_ops_refuse_to_write_into_read_only_arrays(rand: Rand, case: str) -> None:
    call, name = READ_ONLY_WRITES[case]
    with pytest.raises(ReadOnlyArrayError, match=name):
        call(rand)


def test_ops_read_read_only_weights(rand: Rand) -> None:
    x = _a(rand, (3, 64), gp.float32)
    w = _frozen(rand, (64,), gp.float32)
    got = ops.rmsnorm(x, w).to_numpy()
    xf = x.to_numpy().astype(np.float64)
    want = xf / np.sqrt((xf**2).mean(-1, keepdims=True) + 1e-6) * w.to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# --- seeds: integers in [0, 2**64), refused (never wrapped) outside it -----------------------
@pytest.mark.parametrize("seed", [-1, 2**64, 2**64 + 5, -(2**63)])
def test_generator_seed_out_of_range_is_refused(seed: int) -> None:
    with pytest.raises(ValueError, match=r"Generator: seed must be in \[0, 2\*\*64\)"):
        ops.Generator(seed)


@pytest.mark.parametrize("seed", ["1", 1.0, True, [1], None.__class__])
def test_generator_seed_must_be_an_integer(seed: Any) -> None:
    with pytest.raises(TypeError, match="seed must be an integer"):
        ops.Generator(seed)


@pytest.mark.parametrize("offset", [-1, 2**64])
def test_generator_offset_out_of_range_is_refused(offset: int) -> None:
    with pytest.raises(ValueError, match="offset must be in"):
        ops.Generator(1, offset=offset)


def test_generator_seeds_at_the_edges_are_distinct(rand: Rand) -> None:
    logits = _a(rand, (64, 50), gp.float32)
    first = ops.sample(logits, generator=ops.Generator(0)).to_numpy()
    last = ops.sample(logits, generator=ops.Generator(2**64 - 1)).to_numpy()
    again = ops.sample(logits, generator=ops.Generator(2**64 - 1)).to_numpy()
    assert np.array_equal(last, again) and not np.array_equal(first, last)


# --- flags, numbers and choices ---------------------------------------------------------------
def _sdpa(rand: Rand, **kw: Any) -> Any:
    q = _a(rand, (1, 2, 4, 64))
    return ops.scaled_dot_product_attention(q, q, q, **kw)


def _rope(rand: Rand, **kw: Any) -> Any:
    return ops.apply_rope(
        _a(rand, (3, 2, 64)), _a(rand, (3, 1, 64)), *ops.rope_cos_sin(8, 64), _ids([0, 1, 2]), **kw
    )


SCALAR_CASES: dict[str, tuple[Callable[[Rand], Any], type[BaseException], str]] = {
    "is_causal str": (lambda r: _sdpa(r, is_causal="yes"), TypeError, "is_causal must be True"),
    "is_causal int": (lambda r: _sdpa(r, is_causal=1), TypeError, "is_causal must be True"),
    "scale str": (lambda r: _sdpa(r, scale="0.1"), TypeError, "scale must be a real number"),
    "scale nan": (lambda r: _sdpa(r, scale=float("nan")), ValueError, "scale must be finite"),
    "scale bool": (lambda r: _sdpa(r, scale=True), TypeError, "scale must be a real number"),
    "rope inplace str": (lambda r: _rope(r, inplace="no"), TypeError, "inplace must be True"),
    "rope layout junk": (lambda r: _rope(r, layout="x"), ValueError, "layout must be one of"),
    "rope_cos_sin base str": (
        lambda r: ops.rope_cos_sin(8, 64, base="1e4"),
        TypeError,
        "base must be a real number",
    ),
    "rmsnorm eps str": (
        lambda r: ops.rmsnorm(_a(r, (2, 64)), _a(r, (64,)), "1e-6"),
        TypeError,
        "eps must be a real number",
    ),
    "gelu_mul approximate junk": (
        lambda r: ops.gelu_mul(_a(r, (2, 64)), approximate="fast"),
        ValueError,
        "approximate must be one of",
    ),
    "linear activation junk": (
        lambda r: ops.linear(_a(r, (2, 32)), _a(r, (16, 32)), activation="tanh"),
        ValueError,
        "activation must be one of",
    ),
    "sample temperature str": (
        lambda r: ops.sample(_a(r, (2, 50), gp.float32), temperature="1"),
        TypeError,
        "temperature must be a number",
    ),
    "sample top_k float": (
        lambda r: ops.sample(_a(r, (2, 50), gp.float32), top_k=2.0),
        TypeError,
        "top_k must be an int",
    ),
    "sample top_p above 1": (
        lambda r: ops.sample(_a(r, (2, 50), gp.float32), top_p=1.5),
        ValueError,
        "top_p must be",
    ),
    "sample penalty without tokens": (
        lambda r: ops.sample(_a(r, (2, 50), gp.float32), repetition_penalty=1.2),
        ValueError,
        "repetition_penalty=1.2 needs prev_tokens",
    ),
    "sample generator junk": (
        lambda r: ops.sample(_a(r, (2, 50), gp.float32), generator=5),
        TypeError,
        "generator must be a pygpukit.ops.Generator",
    ),
    "rmsnorm x str": (lambda r: ops.rmsnorm("x", _a(r, (64,))), TypeError, "x must be a GPUArray"),
    "softmax out str": (
        lambda r: ops.softmax(_a(r, (2, 16)), out="x"),
        TypeError,
        "out must be a GPUArray",
    ),
}


@pytest.mark.parametrize("case", list(SCALAR_CASES))
def test_scalar_arguments_are_checked(rand: Rand, case: str) -> None:
    call, error, pattern = SCALAR_CASES[case]
    with pytest.raises(error, match=pattern):
        call(rand)


def test_penalty_with_tokens_still_works(rand: Rand) -> None:
    logits = _a(rand, (2, 50), gp.float32)
    prev = _ids([[1, 2], [3, -1]])
    got = ops.sample(logits, temperature=0.0, repetition_penalty=1.3, prev_tokens=prev)
    assert got.shape == (2,)


# --- decode attention: lengths and block tables (checked where the values are on the host) ----
def _decode(rand: Rand, lens: list[int], table: list[list[int]] | None) -> Any:
    q = _a(rand, (2, 2, 64))
    if table is None:
        cache = _a(rand, (2, 1, 8, 64))
        return ops.decode_attention(q, cache, cache, _ids(lens))
    cache = _a(rand, (3, 1, 4, 64))
    return ops.decode_attention(q, cache, cache, _ids(lens), block_table=_ids(table))


DECODE_CASES: dict[str, tuple[list[int], list[list[int]] | None, str]] = {
    "negative length": ([3, -2], None, r"seq_lens\[1\] = -2 is negative"),
    "negative length paged": ([-1, 4], [[0, 1], [2, 0]], r"seq_lens\[0\] = -1"),
    "block past the cache": ([5, 2], [[0, 3], [1, 2]], r"block_table\[0, 1\] = 3"),
    "negative block": ([2, 8], [[0, 1], [2, -1]], r"block_table\[1, 1\] = -1"),
}


@pytest.mark.parametrize("case", list(DECODE_CASES))
def test_decode_lengths_and_blocks_are_checked_on_the_cpu(rand: Rand, case: str) -> None:
    if gp.backend_name() != "cpu":
        pytest.skip("the GPU reads seq_lens and block_table without a check (no sync)")
    lens, table, pattern = DECODE_CASES[case]
    with pytest.raises(ValueError, match=pattern):
        _decode(rand, lens, table)


def test_decode_blocks_beyond_the_length_are_not_read(rand: Rand) -> None:
    # Entries a sequence's length does not reach may hold anything (padding).
    got = _decode(rand, [3, 4], [[0, 99], [2, -7]])
    assert got.shape == (2, 2, 64) and np.isfinite(got.to_numpy().astype(np.float32)).all()
