"""Malformed calls raise the documented exception, and the runtime keeps working afterwards."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp

pytestmark = pytest.mark.gpu

SCALE = """
extern "C" __global__ void scale(float* x, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}
"""


def _kernel():
    return gp.jit(SCALE, func="scale")


def _x():
    return gp.ones((4, 6), dtype="float32")


CASES = [
    ("negative size", lambda: gp.empty((-1, 3)), ValueError),
    ("negative size zeros", lambda: gp.zeros((2, -5), dtype="float32"), ValueError),
    ("unknown dtype", lambda: gp.zeros((3,), dtype="complex64"), TypeError),
    ("dtype garbage", lambda: gp.empty((3,), dtype="floaty"), TypeError),
    ("shape not ints", lambda: gp.zeros(("a", 2)), TypeError),
    ("index out of range", lambda: _x()[4], IndexError),
    ("negative index out of range", lambda: _x()[-5], IndexError),
    ("too many indices", lambda: _x()[0, 0, 0], IndexError),
    ("zero slice step", lambda: _x()[::0], ValueError),
    ("reshape wrong size", lambda: _x().reshape(5, 5), ValueError),
    ("transpose bad axes", lambda: _x().transpose(0, 0), ValueError),
    ("broadcast incompatible", lambda: _x().broadcast_to((3, 6)), ValueError),
    ("assign shape mismatch", lambda: _x().__setitem__(slice(None), gp.ones((3, 3))), ValueError),
    ("view dtype other itemsize", lambda: _x().view("float16").reshape(-1, 3, 7), ValueError),
    ("astype unknown", lambda: _x().astype("float8"), TypeError),
    ("arange zero step", lambda: gp.arange(0, 10, 0), ValueError),
    ("squeeze non-1 axis", lambda: _x().squeeze(0), ValueError),
    (
        "from_numpy object dtype",
        lambda: gp.from_numpy(np.array(["a", "b"], dtype=object)),
        TypeError,
    ),
    ("from_numpy complex", lambda: gp.from_numpy(np.ones(3, np.complex64)), TypeError),
    ("kernel too few args", lambda: _kernel()(_x(), 2.0), TypeError),
    ("kernel too many args", lambda: _kernel()(_x(), 2.0, 24, 5), TypeError),
    ("kernel string for float", lambda: _kernel()(_x(), "2", 24), TypeError),
    ("kernel float for int", lambda: _kernel()(_x(), 2.0, 2.5), TypeError),
    ("kernel ndarray for pointer", lambda: _kernel()(np.ones(3, np.float32), 2.0, 3), TypeError),
    ("kernel None for pointer", lambda: _kernel()(None, 2.0, 3), TypeError),
    ("kernel unknown keyword", lambda: _kernel()(_x(), 2.0, 24, bogus=1), TypeError),
    ("kernel block too large", lambda: _kernel()(_x(), 2.0, 24, grid=1, block=4096), gp.CudaError),
    ("kernel zero grid", lambda: _kernel()(_x(), 2.0, 24, grid=0, block=32), ValueError),
    (
        "broken CUDA source",
        lambda: gp.jit('extern "C" __global__ void k(float* x) { x[0] = oops; }', func="k"),
        gp.CompileError,
    ),
    ("missing function", lambda: gp.jit(SCALE, func="nope"), ValueError),
    (
        "allocation larger than device",
        lambda: gp.empty((1 << 50,), dtype="float32"),
        gp.OutOfMemoryError,
    ),
    ("bad device ordinal", lambda: gp.set_device(99), (ValueError, IndexError)),
    (
        "event elapsed without timing",
        lambda: gp.Event().record().elapsed_time(gp.Event().record()),
        (ValueError, RuntimeError),
    ),
    ("graph replay before capture", lambda: gp.Graph().replay(), (RuntimeError, ValueError)),
]


@pytest.mark.parametrize("name,call,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_and_runtime_survives(name, call, expected, make):
    with pytest.raises(expected):
        call()
    host = make((256,), "float32")
    x = gp.from_numpy(host)
    _kernel()(x, 3.0, x.size)
    np.testing.assert_allclose(x.to_numpy(), host * 3, rtol=1e-6)


def test_compile_error_carries_the_log():
    with pytest.raises(gp.CompileError) as info:
        gp.jit('extern "C" __global__ void k(float* x) {\n  x[0] = undefined_name;\n}', func="k")
    assert "undefined_name" in info.value.log
