"""Python protocols on GPUArray that NumPy and CuPy users expect: ``tolist()``,
``round()``, ``in``, ``copy.copy`` / ``copy.deepcopy`` and pickling.

Each is checked against NumPy on the same values, over every dtype and over
contiguous arrays, views (transposed, strided, offset), 0-d and empty arrays.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.dtypes import SUPPORTED

DTYPES = sorted(SUPPORTED)
FLOATS = [name for name in DTYPES if np.dtype(SUPPORTED[name]).kind == "f"]
HALF = ("float16", "bfloat16")

# (name, host shape, how to view it): the array tested is view(gp.from_numpy(host)).
LAYOUTS: dict[str, tuple[tuple[int, ...], Callable[[object], object]]] = {
    "0-d": ((), lambda a: a),
    "empty": ((0, 3), lambda a: a),
    "vector": ((7,), lambda a: a),
    "matrix": ((3, 5), lambda a: a),
    "transposed": ((4, 6), lambda a: a.T),
    "strided": ((5, 8), lambda a: a[1::2, ::3]),
    "3-d slice": ((3, 4, 5), lambda a: a[1:, :, 2:]),
}


def _pair(rand, dtype: str, layout: str) -> tuple[gp.GPUArray, np.ndarray]:
    shape, view = LAYOUTS[layout]
    host = rand(shape, SUPPORTED[dtype])
    return view(gp.from_numpy(host)), view(host)  # type: ignore[return-value]


def _python_scalars(values: object) -> list[type]:
    if isinstance(values, list):
        return [t for v in values for t in _python_scalars(v)]
    return [type(values)]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_tolist_matches_numpy(rand, dtype: str, layout: str) -> None:
    a, ref = _pair(rand, dtype, layout)
    values = a.tolist()
    expected = ref.tolist()
    assert values == expected
    assert set(_python_scalars(values)) <= {bool, int, float, list}


@pytest.mark.parametrize("ndigits", [None, 0, 1, 2, -1])
@pytest.mark.parametrize("layout", ["0-d", "vector", "strided"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_is_elementwise_in_the_arrays_dtype(rand, dtype, layout, ndigits) -> None:
    a, ref = _pair(rand, dtype, layout)
    ref = ref * 7 if dtype != "bool" else ref  # values with digits to round
    a = gp.from_numpy(np.ascontiguousarray(ref)) if dtype != "bool" else a
    out = round(a) if ndigits is None else round(a, ndigits)
    assert isinstance(out, gp.GPUArray)
    assert out.dtype == a.dtype and out.shape == a.shape
    if dtype == "bool":  # as Python's round(True, -1) == 0 (NumPy has no bool rounding)
        expected = np.round(ref.astype(np.int64), ndigits or 0).astype(bool)
    elif dtype in HALF:  # NumPy has no bfloat16 rounding: the float32 reference
        expected = np.round(ref.astype(np.float32), ndigits or 0).astype(ref.dtype)
    else:
        expected = np.round(ref, ndigits or 0)
    got = out.to_numpy()
    if dtype in HALF:
        # a * 10**n rounds in half precision first, so a value near a rounding boundary may
        # land one decimal step (10**-n) either side, beside the half type's own spacing.
        step = 10.0 ** -(ndigits or 0)
        spacing = np.abs(expected.astype(np.float32)) * (2**-7 if dtype == "bfloat16" else 2**-10)
        error = np.abs(got.astype(np.float32) - expected.astype(np.float32))
        assert np.all(error <= spacing + step * 1.01)
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("ndigits", [1.5, "2", True, None.__class__])
def test_round_refuses_digits_that_are_not_ints(ndigits) -> None:
    with pytest.raises(TypeError, match="ndigits must be an int"):
        round(gp.ones((3,)), ndigits)


@pytest.mark.parametrize("layout", ["vector", "matrix", "transposed", "strided", "0-d"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_contains_matches_numpy(rand, dtype: str, layout: str) -> None:
    a, ref = _pair(rand, dtype, layout)
    present = ref.flat[ref.size // 2].item()
    assert (present in a) is True and (present in ref)
    absent = 1000 if dtype not in ("bool", "int8", "uint8") else None
    if absent is not None:
        assert (absent in a) is (absent in ref) is False
    comparable = ref.astype(np.float32) if dtype == "bfloat16" else ref  # ml_dtypes has no ==
    for odd in ("text", None, 1 + 2j):
        assert (odd in a) is (odd in comparable)


@pytest.mark.parametrize("dtype", FLOATS)
def test_contains_nan_is_false_and_arrays_broadcast(rand, dtype: str) -> None:
    host = rand((4, 3), SUPPORTED[dtype])
    host[1, 1] = np.nan
    a = gp.from_numpy(host)
    assert (np.nan in a) is False
    assert (host[2] in a) is True  # a row broadcasts against every row
    assert (host[2][::-1] + 100 in a) is False
    with pytest.raises(ValueError):
        host[0, :2] in a  # noqa: B015  (shapes (2,) and (4, 3) do not broadcast)


def test_contains_in_an_empty_array_is_false() -> None:
    assert (1.0 in gp.empty((0, 4))) is False


def _same(copied: gp.GPUArray, original_values: np.ndarray) -> None:
    assert copied.shape == original_values.shape and copied.dtype == original_values.dtype
    np.testing.assert_array_equal(copied.to_numpy(), original_values)


@pytest.mark.parametrize(
    "how",
    ["pickle", "pickle-protocol-2", "deepcopy", "copy"],
)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_copies_and_pickles_keep_values_shape_and_dtype(rand, dtype, layout, how) -> None:
    a, ref = _pair(rand, dtype, layout)
    before = np.array(ref)
    if how == "pickle":
        out = pickle.loads(pickle.dumps(a))
    elif how == "pickle-protocol-2":
        out = pickle.loads(pickle.dumps(a, protocol=2))
    elif how == "deepcopy":
        out = copy.deepcopy(a)
    else:
        out = copy.copy(a)
    assert isinstance(out, gp.GPUArray)
    _same(out, before)
    assert out.is_contiguous
    if a.size:  # the copy owns its memory: writing the original leaves it alone
        a[...] = gp.from_numpy(rand(a.shape, SUPPORTED[dtype]))
        _same(out, before)


def test_deepcopy_of_a_container_shares_one_copy_per_array(rand) -> None:
    a = gp.from_numpy(rand((5,)))
    box = {"first": a, "again": a, "other": gp.from_numpy(rand((2,)))}
    out = copy.deepcopy(box)
    assert out["first"] is out["again"] and out["first"] is not a
    np.testing.assert_array_equal(out["first"].to_numpy(), a.to_numpy())


def test_pickle_names_only_public_functions(rand) -> None:
    data = pickle.dumps(gp.from_numpy(rand((3,))))
    assert b"pygpukit.creation" in data and b"from_numpy" in data
    assert b"_native" not in data and b"_impl" not in data


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_copies_of_a_read_only_array_are_writeable(rand, how: str) -> None:
    host = rand((4, 3))
    a = gp.from_numpy(host)
    a.setflags(write=False)
    out = {
        "pickle": lambda: pickle.loads(pickle.dumps(a)),
        "deepcopy": lambda: copy.deepcopy(a),
        "copy": lambda: copy.copy(a),
    }[how]()
    assert out.flags.writeable and not a.flags.writeable  # as NumPy's copies
    out[0, 0] = 5.0
    np.testing.assert_array_equal(a.to_numpy(), host)
