"""Zero-extent inputs and size limits of every op on the GPU (cases: ops_edge_cases.py).

The CPU tests (test_edge_cases.py) run the same cases: on the CUDA backend none may reach a
launch with an empty grid (the runtime raises "grid: dimension 0 out of range"), and the results
and errors must be those of the CPU backend. The softmax size-limit test allocates 4 GiB.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_edge_cases import CASES, ERROR_CASES, check, linear_out_overlap

import pygpukit as gp
from pygpukit import ops

pytestmark = pytest.mark.gpu

Rand = Callable[..., np.ndarray]


@pytest.mark.parametrize("name", list(CASES))
def test_zero_extent(rand: Rand, name: str) -> None:
    got, want = CASES[name](rand)
    check(got, want)
    gp.synchronize()  # a fault in a launch that should not have happened surfaces here


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_zero_extent_errors(rand: Rand, name: str) -> None:
    call, error, pattern = ERROR_CASES[name]
    with pytest.raises(error, match=pattern):
        call(rand)


def test_softmax_width_above_int32() -> None:
    """A row of 2**31 elements: a ValueError naming the width, not a TypeError from packing."""
    x = gp.empty((1, 2**31), gp.float16)  # never read: the op refuses it before the launch
    with pytest.raises(ValueError, match=r"softmax: width = 2147483648"):
        ops.softmax(x)


def test_sampling_vocab_above_int32() -> None:
    logits = gp.empty((0, 2**31), gp.float16)  # checked from the shape alone: no memory needed
    with pytest.raises(ValueError, match=r"logits: V = 2147483648"):
        ops.argmax(logits)
    with pytest.raises(ValueError, match=r"logits: V = 2147483648"):
        ops.sample(logits)


def test_linear_out_must_not_overlap_an_input(rand: Rand) -> None:
    linear_out_overlap(rand)
