"""Zero-extent inputs and size limits of every op on the CPU backend (cases: ops_edge_cases.py).

The same cases run on the GPU in gpu/test_gpu_edge_cases.py: both backends must return the same
empty or zero-filled results and raise the same errors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_edge_cases import CASES, ERROR_CASES, check, linear_out_overlap

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import _common

Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize("name", list(CASES))
def test_zero_extent(rand: Rand, name: str) -> None:
    got, want = CASES[name](rand)
    check(got, want)


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_zero_extent_errors(rand: Rand, name: str) -> None:
    call, error, pattern = ERROR_CASES[name]
    with pytest.raises(error, match=pattern):
        call(rand)


def test_check_int32() -> None:
    _common.check_int32("op", width=2**31 - 1, rows=0)
    with pytest.raises(ValueError, match=r"op: width = 2147483648 is above 2\*\*31 - 1"):
        _common.check_int32("op", rows=3, width=2**31)


def test_rotary_dim_must_be_an_int(rand: Rand) -> None:
    q = gp.from_numpy(rand((3, 2, 64)).astype(np.float16))
    k = gp.from_numpy(rand((3, 1, 64)).astype(np.float16))
    cos, sin = ops.rope_cos_sin(8, 64)
    pos = gp.from_numpy(np.array([0, 1, 2], np.int32))
    with pytest.raises(TypeError, match="rotary_dim must be an int"):
        ops.apply_rope(q, k, cos, sin, pos, rotary_dim=64.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rotary_dim must be an int"):
        ops.apply_rope(q, k, cos, sin, pos, rotary_dim=True)


def test_min_p_array_is_refused(rand: Rand) -> None:
    logits = gp.from_numpy(rand((2, 50)))
    per_row = gp.from_numpy(np.array([0.1, 0.2], np.float32))
    with pytest.raises(TypeError, match="min_p must be a number"):
        ops.sample(logits, min_p=per_row)  # type: ignore[arg-type]


def test_vocab_above_int32_is_refused_on_every_backend() -> None:
    """A V of 2**31 cannot reach the sampling kernels; the CPU backend refuses it the same way.

    Zero rows keep the array empty (no memory), and the check comes before any row is read.
    """
    logits = gp.from_numpy(np.zeros((0, 2**31), np.float32))
    with pytest.raises(ValueError, match=r"logits: V = 2147483648 is above 2\*\*31 - 1"):
        ops.argmax(logits)
    with pytest.raises(ValueError, match=r"logits: V = 2147483648"):
        ops.sample(logits)


def test_linear_out_must_not_overlap_an_input(rand: Rand) -> None:
    linear_out_overlap(rand)
