"""pygpukit.safetensors: every dtype round-trips, and malformed headers raise typed errors."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.errors import SafeTensorsError
from pygpukit.safetensors import DTYPES, SafeTensorsFile, write_safetensors


def _tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for code, dtype in DTYPES.items():
        shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(0, 3))))
        if dtype.kind == "f" or dtype == gp.bfloat16:
            out[f"t.{code}"] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            out[f"t.{code}"] = np.asarray(rng.standard_normal(shape) > 0)
        else:
            out[f"t.{code}"] = rng.integers(0 if dtype.kind == "u" else -100, 100, shape, dtype)
    return out


def test_every_dtype_round_trips_as_read_only_views(tmp_path, rng):
    tensors = _tensors(rng)
    path = tmp_path / "a.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt"})
    f = SafeTensorsFile(path)
    assert list(f.tensors) == list(tensors) and f.metadata == {"format": "pt"}
    for name, a in tensors.items():
        view = f.host_view(name)
        assert view.dtype == a.dtype and view.shape == a.shape
        assert not view.flags.writeable
        np.testing.assert_array_equal(view, a)
    f.close()


def test_unsupported_dtype_is_refused_when_writing(tmp_path):
    with pytest.raises(TypeError, match=r"'c'.*complex"):
        write_safetensors(tmp_path / "c.safetensors", {"c": np.ones(3, np.complex64)})
    assert np.dtype(gp.bfloat16) in DTYPES.values()


def _raw(header: dict, data: bytes = b"") -> bytes:
    """A file of ``header`` and ``data``; a header value that is a tuple is one F32 entry."""
    header = {
        k: {"dtype": "F32", "shape": v[0], "data_offsets": v[1]} if isinstance(v, tuple) else v
        for k, v in header.items()
    }
    blob = json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + data


@pytest.mark.parametrize(
    ("raw", "match", "tensor"),
    [
        (b"\x01\x02", "shorter than the 8-byte", None),
        (struct.pack("<Q", 1 << 40), "more than", None),
        (struct.pack("<Q", 64) + b"{}", "truncated", None),
        (struct.pack("<Q", 2) + b"{x", "not valid JSON", None),
        (_raw({"a": {"dtype": "Q8", "shape": [1], "data_offsets": [0, 1]}}, b"\0"), "unknown", "a"),
        (_raw({"a": ([-1], [0, 4])}, b"\0" * 4), "non-negative", "a"),
        (_raw({"a": ([2], [0, 8])}, b"\0" * 4), "outside", "a"),
        (_raw({"a": ([2], [0, 4])}, b"\0" * 4), "needs 8", "a"),
        (_raw({"a": ([2], [0, 8]), "b": ([2], [4, 12])}, b"\0" * 12), "overlaps", "b"),
    ],
)  # fmt: skip
def test_malformed_files_name_the_file_and_tensor(tmp_path, raw, match, tensor):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    with pytest.raises(SafeTensorsError, match=match) as info:
        SafeTensorsFile(path)
    assert info.value.path == str(path) and info.value.tensor == tensor
    assert str(path) in str(info.value) and isinstance(info.value, ValueError)


def test_missing_file(tmp_path):
    with pytest.raises(SafeTensorsError, match="cannot read"):
        SafeTensorsFile(tmp_path / "none.safetensors")
