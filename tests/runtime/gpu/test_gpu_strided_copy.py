"""Strided copies (``contiguous()``, ``copy()``, assignment into views) on the GPU.

The copy kernel moves the innermost dimension in units of up to 8 bytes when it is contiguous on
both sides and the addresses and strides allow it (the attention output's head transpose); the
cases here cover those widened layouts and the ones that must keep the element size
(odd inner extents, misaligned offsets, reversed or broadcast inner dimensions), against NumPy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp

pytestmark = pytest.mark.gpu

Make = Callable[[tuple[int, ...], str], np.ndarray]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "int8", "float64"])
@pytest.mark.parametrize("inner", [1, 3, 4, 8, 128, 130])
def test_head_transpose(make: Make, dtype: str, inner: int) -> None:
    """[B, H, S, D] seen as [B, S, H, D]: rows of D contiguous on both sides."""
    host = make((2, 5, 7, inner), dtype)
    got = gp.from_numpy(host).transpose(0, 2, 1, 3).contiguous().to_numpy()
    np.testing.assert_array_equal(got, np.ascontiguousarray(host.transpose(0, 2, 1, 3)))


@pytest.mark.parametrize("start", [0, 1, 2, 3, 4])
def test_offset_views_keep_their_alignment(make: Make, start: int) -> None:
    """A view starting ``start`` bfloat16 elements in: widened only where 8-byte aligned."""
    host = make((6, 40), "bfloat16")
    view = gp.from_numpy(host)[:, start : start + 32]
    np.testing.assert_array_equal(view.contiguous().to_numpy(), host[:, start : start + 32])
    out = gp.from_numpy(make((6, 40), "bfloat16"))
    out[:, start : start + 32] = view
    np.testing.assert_array_equal(
        out.to_numpy()[:, start : start + 32], host[:, start : start + 32]
    )


def test_reversed_and_broadcast_layouts(make: Make) -> None:
    """A reversed inner axis, a reversed outer axis and a broadcast row (zero stride)."""
    host = make((4, 6, 16), "float16")
    arr = gp.from_numpy(host)
    np.testing.assert_array_equal(arr[:, :, ::-1].contiguous().to_numpy(), host[:, :, ::-1])
    np.testing.assert_array_equal(arr[::-1].contiguous().to_numpy(), host[::-1])
    row = make((16,), "float16")
    wide = gp.from_numpy(row).broadcast_to((5, 16)).contiguous().to_numpy()
    np.testing.assert_array_equal(wide, np.broadcast_to(row, (5, 16)))
