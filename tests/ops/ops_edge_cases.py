"""Zero-extent inputs of every op, shared by the CPU tests and the GPU tests (``gpu/``).

Each case builds its inputs on the current backend from non-zero random data, runs one op with
an empty axis somewhere (0 rows, 0 tokens, batch 0, width 0, N = 0, K = 0, no keys, no cache
blocks ...) and returns ``(got, want)``: the op's result (or the array it writes in place) and
the float64 NumPy value it must equal. On the CUDA backend none of these may reach a launch with
an empty grid (the runtime refuses it); the ops return the empty or zero-filled result instead,
and the CPU backend must agree.

``ERROR_CASES`` are the zero-extent inputs where the op is undefined: they must raise the named
error before anything is enqueued, on both backends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from ops_references import act_ref

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops.linear import linear  # `ops.linear` is also the module's name

Rand = Callable[..., np.ndarray]
Case = Callable[[Rand], tuple[Any, np.ndarray]]


def _a(rand: Rand, shape: tuple[int, ...], dtype: Any = gp.float16) -> gp.GPUArray:
    return gp.from_numpy(rand(shape).astype(np.dtype(dtype)))


def _ids(values: Any, dtype: Any = np.int32) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(np.asarray(values, dtype=dtype)))


def _empty(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float64)


def _cache(rand: Rand, shape: tuple[int, ...]) -> tuple[gp.GPUArray, np.ndarray]:
    host = rand(shape).astype(np.float16)
    return gp.from_numpy(host), host.astype(np.float64)


def _kv_append_no_tokens(rand: Rand) -> tuple[Any, np.ndarray]:
    kc, before = _cache(rand, (2, 1, 4, 64))
    vc = _a(rand, (2, 1, 4, 64))
    ops.kv_cache_append(_a(rand, (2, 1, 0, 64)), _a(rand, (2, 1, 0, 64)), kc, vc, _ids([0, 1]))
    return kc, before


def _kv_append_batch0(rand: Rand) -> tuple[Any, np.ndarray]:
    kc, vc = _a(rand, (0, 1, 4, 64)), _a(rand, (0, 1, 4, 64))
    ops.kv_cache_append(_a(rand, (0, 1, 3, 64)), _a(rand, (0, 1, 3, 64)), kc, vc, _ids([]))
    return kc, _empty(0, 1, 4, 64)


def _kv_append_cache_len0(rand: Rand) -> tuple[Any, np.ndarray]:
    kc, vc = _a(rand, (2, 1, 0, 64)), _a(rand, (2, 1, 0, 64))
    ops.kv_cache_append(_a(rand, (2, 1, 1, 64)), _a(rand, (2, 1, 1, 64)), kc, vc, _ids([0, 1]))
    return kc, _empty(2, 1, 0, 64)


def _paged_write_no_tokens(rand: Rand) -> tuple[Any, np.ndarray]:
    kc, before = _cache(rand, (3, 2, 16, 64))
    vc = _a(rand, (3, 2, 16, 64))
    ops.paged_kv_cache_write(_a(rand, (0, 2, 64)), _a(rand, (0, 2, 64)), kc, vc, _ids([]))
    return kc, before


def _paged_write_no_blocks(rand: Rand) -> tuple[Any, np.ndarray]:
    kc, vc = _a(rand, (0, 2, 16, 64)), _a(rand, (0, 2, 16, 64))
    ops.paged_kv_cache_write(_a(rand, (2, 2, 64)), _a(rand, (2, 2, 64)), kc, vc, _ids([0, 17]))
    return kc, _empty(0, 2, 16, 64)


def _linear_k0(rand: Rand, m: int, dtype: Any, activation: str | None) -> tuple[Any, np.ndarray]:
    bias = rand((5,)).astype(np.dtype(dtype))
    got = linear(
        _a(rand, (m, 0), dtype), _a(rand, (5, 0), dtype), gp.from_numpy(bias), activation=activation
    )
    # A sum over K = 0 terms is 0: the result is activation(bias) on every row, rounded once.
    want = act_ref(bias.astype(np.float64), activation).astype(np.dtype(dtype))
    return got, np.broadcast_to(want.astype(np.float64), (m, 5))


def _sample_b0(rand: Rand) -> tuple[Any, np.ndarray]:
    got = ops.sample(_a(rand, (0, 50), gp.float32), top_k=5, generator=ops.Generator(7))
    return got, np.zeros((0,), np.float64)


def _sample_empty_history(rand: Rand) -> tuple[Any, np.ndarray]:
    """An empty history ([B, 0]) with a penalty draws exactly what no penalty draws."""
    logits = _a(rand, (3, 50), gp.float32)
    history = gp.from_numpy(np.zeros((3, 0), np.int32))
    want = ops.sample(logits, generator=ops.Generator(11)).to_numpy()
    got = ops.sample(
        logits, repetition_penalty=1.5, prev_tokens=history, generator=ops.Generator(11)
    )
    return got, want.astype(np.float64)


def _sample_top_k_above_int32(rand: Rand) -> tuple[Any, np.ndarray]:
    """top_k >= V keeps every token, however large (the kernel takes an int: clamped to V)."""
    logits = _a(rand, (3, 50), gp.float32)
    want = ops.sample(logits, top_k=0, generator=ops.Generator(5)).to_numpy()
    got = ops.sample(logits, top_k=2**40, generator=ops.Generator(5))
    return got, want.astype(np.float64)


def _sdpa(rand: Rand, b: int, hq: int, sq: int, sk: int, causal: bool) -> tuple[Any, np.ndarray]:
    q = _a(rand, (b, hq, sq, 64))
    k, v = _a(rand, (b, 1, sk, 64)), _a(rand, (b, 1, sk, 64))
    got = ops.scaled_dot_product_attention(q, k, v, is_causal=causal)
    # No keys to attend to: every row outputs zeros (the rule for a row that sees no key).
    return got, _empty(b, hq, sq, 64)


def _decode(rand: Rand, cache_len: int, lens: list[int]) -> tuple[Any, np.ndarray]:
    b = len(lens)
    kc, vc = _a(rand, (b, 2, cache_len, 64)), _a(rand, (b, 2, cache_len, 64))
    got = ops.decode_attention(_a(rand, (b, 4, 64)), kc, vc, _ids(lens))
    return got, _empty(b, 4, 64)


def _decode_paged_no_table_columns(rand: Rand) -> tuple[Any, np.ndarray]:
    kc, vc = _a(rand, (3, 2, 16, 64)), _a(rand, (3, 2, 16, 64))
    table = gp.from_numpy(np.zeros((2, 0), np.int32))
    got = ops.decode_attention(_a(rand, (2, 4, 64)), kc, vc, _ids([5, 9]), block_table=table)
    return got, _empty(2, 4, 64)


def _rope(rand: Rand, q_shape: tuple[int, ...], k_shape: tuple[int, ...]) -> tuple[Any, np.ndarray]:
    cos, sin = ops.rope_cos_sin(16, 64, dtype="float16")
    positions = _ids(np.arange(int(np.prod(q_shape[:-2]))).reshape(q_shape[:-2]) % 16)
    got_q, _ = ops.apply_rope(_a(rand, q_shape), _a(rand, k_shape), cos, sin, positions)
    return got_q, _empty(*q_shape)


CASES: dict[str, Case] = {
    "silu_mul rows=0": lambda r: (ops.silu_mul(_a(r, (0, 8))), _empty(0, 4)),
    "silu_mul d=0": lambda r: (ops.silu_mul(_a(r, (3, 0))), _empty(3, 0)),
    "gelu_mul batch=0": lambda r: (ops.gelu_mul(_a(r, (2, 0, 6))), _empty(2, 0, 3)),
    "softmax rows=0": lambda r: (ops.softmax(_a(r, (0, 8))), _empty(0, 8)),
    "softmax width=0": lambda r: (ops.softmax(_a(r, (3, 0))), _empty(3, 0)),
    "embedding ids=0": lambda r: (ops.embedding(_ids([]), _a(r, (5, 4))), _empty(0, 4)),
    "embedding ids [2, 0]": lambda r: (
        ops.embedding(_ids(np.zeros((2, 0))), _a(r, (5, 4))),
        _empty(2, 0, 4),
    ),
    "embedding dim=0": lambda r: (ops.embedding(_ids([1, 3]), _a(r, (5, 0))), _empty(2, 0)),
    "rmsnorm rows=0": lambda r: (ops.rmsnorm(_a(r, (0, 8)), _a(r, (8,))), _empty(0, 8)),
    "rmsnorm width=0": lambda r: (ops.rmsnorm(_a(r, (3, 0)), _a(r, (0,))), _empty(3, 0)),
    "layernorm width=0": lambda r: (
        ops.layernorm(_a(r, (3, 0)), _a(r, (0,)), _a(r, (0,))),
        _empty(3, 0),
    ),
    "add_rmsnorm rows=0": lambda r: (
        ops.add_rmsnorm(_a(r, (0, 8)), _a(r, (0, 8)), _a(r, (8,)))[1],
        _empty(0, 8),
    ),
    "add_layernorm width=0": lambda r: (
        ops.add_layernorm(_a(r, (3, 0)), _a(r, (3, 0)), _a(r, (0,)))[0],
        _empty(3, 0),
    ),
    "gemv N=0": lambda r: (ops.gemv(_a(r, (2, 8)), _a(r, (0, 8))), _empty(2, 0)),
    "gemv K=0": lambda r: (ops.gemv(_a(r, (2, 0)), _a(r, (4, 0))), _empty(2, 4)),
    "gemv [K] K=0": lambda r: (ops.gemv(_a(r, (0,)), _a(r, (4, 0))), _empty(4)),
    "linear M=0": lambda r: (linear(_a(r, (0, 8)), _a(r, (4, 8)), _a(r, (4,))), _empty(0, 4)),
    "linear batch=0": lambda r: (linear(_a(r, (2, 0, 8)), _a(r, (4, 8))), _empty(2, 0, 4)),
    "linear N=0": lambda r: (linear(_a(r, (3, 8)), _a(r, (0, 8)), _a(r, (0,))), _empty(3, 0)),
    "linear K=0 gemv rows": lambda r: _linear_k0(r, 3, gp.float16, "gelu_tanh"),
    "linear K=0 matmul rows": lambda r: _linear_k0(r, 20, gp.bfloat16, "silu"),
    "linear K=0 float32": lambda r: _linear_k0(r, 2, gp.float32, None),
    "argmax B=0": lambda r: (ops.argmax(_a(r, (0, 50), gp.float32)), _empty(0)),
    "sample B=0": _sample_b0,
    "sample empty history": _sample_empty_history,
    "sample top_k > int32": _sample_top_k_above_int32,
    "apply_rope tokens=0": lambda r: _rope(r, (0, 2, 64), (0, 1, 64)),
    "apply_rope batch=0": lambda r: _rope(r, (0, 3, 2, 64), (0, 3, 1, 64)),
    "apply_rope q_heads=0": lambda r: _rope(r, (3, 0, 64), (3, 1, 64)),
    "sdpa B=0": lambda r: _sdpa(r, 0, 2, 3, 5, False),
    "sdpa Hq=0": lambda r: _sdpa(r, 1, 0, 3, 5, False),
    "sdpa Sq=0": lambda r: _sdpa(r, 1, 2, 0, 5, True),
    "sdpa Sk=0": lambda r: _sdpa(r, 1, 2, 3, 0, False),
    "sdpa Sk=0 causal": lambda r: _sdpa(r, 2, 2, 130, 0, True),
    "decode B=0": lambda r: _decode(r, 8, []),
    "decode max_len=0": lambda r: _decode(r, 0, [0, 4]),
    "decode lengths 0": lambda r: _decode(r, 300, [0, 0, 0]),
    "decode paged max_blocks=0": _decode_paged_no_table_columns,
    "kv_cache_append T=0": _kv_append_no_tokens,
    "kv_cache_append B=0": _kv_append_batch0,
    "kv_cache_append max_len=0": _kv_append_cache_len0,
    "paged_kv_cache_write N=0": _paged_write_no_tokens,
    "paged_kv_cache_write num_blocks=0": _paged_write_no_blocks,
}


def _paged_decode_without_blocks(rand: Rand) -> None:
    kc, vc = _a(rand, (0, 2, 16, 64)), _a(rand, (0, 2, 16, 64))
    table = gp.from_numpy(np.zeros((2, 3), np.int32))
    ops.decode_attention(_a(rand, (2, 4, 64)), kc, vc, _ids([0, 5]), block_table=table)


#: name -> (call, exception type, message pattern).
ERROR_CASES: dict[str, tuple[Callable[[Rand], Any], type[Exception], str]] = {
    "argmax V=0": (lambda r: ops.argmax(_a(r, (2, 0), gp.float32)), ValueError, "empty vocab"),
    "sample V=0": (lambda r: ops.sample(_a(r, (2, 0), gp.float32)), ValueError, "empty vocab"),
    "gemv M=0": (lambda r: ops.gemv(_a(r, (0, 8)), _a(r, (4, 8))), ValueError, "1 to 8 rows"),
    "decode paged num_blocks=0": (_paged_decode_without_blocks, ValueError, "no blocks"),
    "paged_kv_cache_write block_size=0": (
        lambda r: ops.paged_kv_cache_write(
            _a(r, (2, 1, 64)),
            _a(r, (2, 1, 64)),
            _a(r, (3, 1, 0, 64)),
            _a(r, (3, 1, 0, 64)),
            _ids([0, 1]),
        ),
        ValueError,
        "block_size 0",
    ),
}


def check(got: Any, want: np.ndarray) -> None:
    """``got`` (a GPUArray) has ``want``'s shape and values.

    Zeros and token ids must match exactly (``rtol`` leaves no slack at 0 or below 50); the
    one computed value, ``activation(bias)`` of a K = 0 linear, may differ by a rounding of the
    half-precision output (the GPU applies the activation in float32, the reference in float64).
    """
    host = got.to_numpy()
    assert host.shape == want.shape, (host.shape, want.shape)
    if host.size:
        np.testing.assert_allclose(host.astype(np.float64), want, rtol=1e-2, atol=0)


def linear_out_overlap(rand: Rand) -> None:
    """``out`` overlapping ``x`` or ``weight`` is refused; an adjacent, disjoint ``out`` works."""
    import pytest  # here, not at the top: the module is also imported outside pytest's tests

    w = gp.from_numpy(rand((16, 16)).astype(gp.bfloat16))
    buf = gp.from_numpy(rand((4, 16)).astype(gp.bfloat16))
    x, after = buf[0:2], buf[2:4]  # one allocation, two disjoint halves
    for call in (ops.gemv, linear):
        with pytest.raises(ValueError, match="out overlaps x"):
            call(x, w, out=x)
        with pytest.raises(ValueError, match="out overlaps weight"):
            call(x, w, out=w[3:5])
        want = x.to_numpy().astype(np.float64) @ w.to_numpy().astype(np.float64).T
        got = call(x, w, out=after)
        assert got is after
        err = np.linalg.norm(got.to_numpy().astype(np.float64) - want) / np.linalg.norm(want)
        assert err < 1e-2  # bfloat16 output
