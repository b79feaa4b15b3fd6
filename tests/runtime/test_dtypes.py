from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp
from pygpukit import dtypes

ALL = [
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
]


def test_exported_dtypes_are_numpy_dtypes() -> None:
    assert gp.float32 == np.float32
    assert gp.float16 == np.dtype("float16")
    assert gp.bfloat16 == np.dtype(ml_dtypes.bfloat16)
    assert gp.bool_ == np.bool_
    assert [d.name for d in dtypes.SUPPORTED.values()] == ALL


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("float32", "float32"),
        ("f4", "float32"),
        ("fp32", "float32"),
        ("bf16", "bfloat16"),
        ("BF16", "bfloat16"),
        ("half", "float16"),
        ("fp16", "float16"),
        ("double", "float64"),
        ("u8", "uint8"),
        ("i64", "int64"),
        (np.int16, "int16"),
        (np.dtype("int8"), "int8"),
        (ml_dtypes.bfloat16, "bfloat16"),
        (float, "float64"),
        (bool, "bool"),
        (gp.int32, "int32"),
    ],
)
def test_normalize_accepts(spec: object, name: str) -> None:
    assert dtypes.normalize(spec).name == name


@pytest.mark.parametrize(
    "spec",
    ["complex64", "float128", "uint16", "uint32", "U8", "object", "nonsense", object, 3, None],
)
def test_normalize_rejects_with_type_error(spec: object) -> None:
    with pytest.raises(TypeError, match="unsupported dtype"):
        dtypes.normalize(spec)


@pytest.mark.parametrize("name", ALL)
def test_every_dtype_round_trips(name: str, rand) -> None:
    host = rand((5, 7), dtypes.normalize(name))
    arr = gp.from_numpy(host)
    assert arr.dtype == host.dtype
    back = arr.to_numpy()
    assert back.dtype == host.dtype
    np.testing.assert_array_equal(back.view(np.uint8), host.view(np.uint8))


@pytest.mark.parametrize("name", ALL)
def test_every_dtype_round_trips_strided(name: str, rand) -> None:
    host = rand((6, 9, 4), dtypes.normalize(name))
    view = gp.from_numpy(host)[1::2, ::-3, 2:]
    np.testing.assert_array_equal(view.to_numpy(), host[1::2, ::-3, 2:])
    # a strided host array is copied correctly too
    np.testing.assert_array_equal(gp.from_numpy(host[:, ::2].T).to_numpy(), host[:, ::2].T)


def test_is_floating() -> None:
    assert dtypes.is_floating(gp.bfloat16)
    assert dtypes.is_floating(gp.float16)
    assert not dtypes.is_floating(gp.int32)
    assert not dtypes.is_floating(gp.bool_)
