from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import pygpukit as gp

#: Every runtime dtype (tests/runtime/test_dtypes.py pins the list itself).
DTYPES = list(gp.dtypes.SUPPORTED)


def test_metadata(rand) -> None:
    host = rand((3, 4, 5), np.float16)
    a = gp.from_numpy(host)
    assert (a.shape, a.strides, a.ndim, a.size, a.nbytes, a.itemsize) == (
        host.shape,
        host.strides,
        3,
        60,
        120,
        2,
    )
    assert a.dtype == np.float16
    assert len(a) == 3
    assert a.device in ("cpu", "cuda:0")
    assert isinstance(a.data_ptr, int)
    assert a.is_contiguous()
    assert not a[:, ::2].is_contiguous()


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES)
def test_astype_matches_numpy(src: str, dst: str, rand) -> None:
    src_dt, dst_dt = gp.dtypes.normalize(src), gp.dtypes.normalize(dst)
    host = rand((4, 6), src_dt)
    if gp.dtypes.is_floating(src_dt) and dst_dt.kind in "iu":
        # keep float->int casts in range: out-of-range conversions are undefined in C
        host = np.clip(host.astype(np.float32), -100, 100).astype(src_dt)
        if dst_dt.kind == "u":
            host = np.abs(host.astype(np.float32)).astype(src_dt)
    if dst_dt.kind == "u" and src_dt.kind == "i":
        host = np.abs(host)
    out = gp.from_numpy(host)[:, ::2].astype(dst)
    assert out.dtype == dst_dt
    assert out.is_contiguous()
    expected = host[:, ::2].astype(dst_dt)
    np.testing.assert_array_equal(out.to_numpy().view(np.uint8), expected.view(np.uint8))


def test_astype_copy_false_and_copy(rand) -> None:
    a = gp.from_numpy(rand((3,)))
    assert a.astype("float32", copy=False) is a
    b = a.copy()
    b[0] = 99.0
    assert a.to_numpy()[0] != 99.0
    assert a.contiguous() is a


def test_setitem_scalar_array_and_broadcast(rand) -> None:
    host = rand((4, 5))
    a = gp.from_numpy(host)
    row = rand((5,))
    a[1] = gp.from_numpy(row)
    host[1] = row
    a[2:, ::2] = 0.5
    host[2:, ::2] = 0.5
    col = rand((4, 1))
    a[:, 4:] = col
    host[:, 4:] = col
    a[0, :3] = [7, 8, 9]
    host[0, :3] = [7, 8, 9]
    a[3] = np.float32(-1)
    host[3] = -1
    np.testing.assert_array_equal(a.to_numpy(), host)


def test_fill_strided_view(rand) -> None:
    host = rand((6, 6), np.int32)
    a = gp.from_numpy(host)
    a[::2, 1::3].fill(-4)
    host[::2, 1::3] = -4
    np.testing.assert_array_equal(a.to_numpy(), host)


def test_scalars_item_bool_len_iter(rand) -> None:
    host = rand((3, 2))
    a = gp.from_numpy(host)
    assert a[1, 1].shape == ()
    assert a[1, 1].item() == host[1, 1]
    assert float(a[2, 0]) == float(host[2, 0])
    assert int(gp.full((), 5)) == 5
    assert bool(gp.full((1,), True)) is True
    assert [r.to_numpy().tolist() for r in a] == host.tolist()
    assert list(range(10))[gp.full((), 3, dtype="int32")] == 3


def test_view_dtype_and_flatten_ravel(rand) -> None:
    host = rand((2, 3), np.float32)
    a = gp.from_numpy(host)
    np.testing.assert_array_equal(a.view("int32").to_numpy(), host.view(np.int32))
    np.testing.assert_array_equal(a.T.ravel().to_numpy(), host.T.ravel())
    flat = a.flatten()
    flat[0] = 42.0
    assert a.to_numpy()[0, 0] == host[0, 0]
    np.testing.assert_array_equal(gp.reshape(a, (3, 2)).to_numpy(), host.reshape(3, 2))


def test_to_device_same_device_is_identity(rand) -> None:
    a = gp.from_numpy(rand((3,)))
    assert a.to_device(0) is a


def test_repr_and_str(rand) -> None:
    host = rand((2, 3))
    a = gp.from_numpy(host)
    text = repr(a)
    assert text.startswith("GPUArray([[")
    assert "dtype=float32" in text and f"device='{a.device}'" in text
    b = gp.from_numpy(np.array([1.5, -2], dtype=ml_dtypes.bfloat16))
    assert "dtype=bfloat16" in repr(b) and "1.5" in repr(b)
    assert str(gp.arange(3)) == "[0 1 2]"
    assert "dtype=int32" in repr(gp.zeros((0, 4), "int32"))


def test_repr_of_large_array_does_not_fetch(monkeypatch) -> None:
    from pygpukit import array

    monkeypatch.setattr(array, "REPR_MAX_BYTES", 64)
    a = gp.ones((100,))
    text = repr(a)
    assert "values not fetched" in text and "shape=(100,)" in text


def test_direct_construction_is_refused() -> None:
    with pytest.raises(TypeError, match=r"gp\.empty"):
        gp.GPUArray((3,))
