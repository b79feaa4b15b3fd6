"""Argument validation of the runtime's public entry points, one class of argument at a time.

Every class (flags, axes, sizes and shapes, dtypes, streams, arrays, ``out=``, DLPack producers)
lists its cases: each must raise the named exception type, with a message naming the argument,
before any work starts, and leave no memory behind. A last class checks that no message prints
a whole array. Runs on whichever backend is active (CPU here, CUDA on the GPU machine).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import validation

Case = tuple[Callable[[], Any], type[BaseException], str]


def _a(shape: tuple[int, ...] = (3, 4), dtype: str = "float32") -> gp.GPUArray:
    rng = np.random.default_rng()
    return gp.from_numpy((rng.standard_normal(shape) * 3 + 0.5).astype(dtype))


def _run(case: Case) -> None:
    call, error, pattern = case
    gp.synchronize()
    before = gp.memory.stats()["allocated_bytes"]
    with pytest.raises(error, match=pattern):
        call()
    gp.synchronize()
    # nothing the failed call allocated is left behind
    assert gp.memory.stats()["allocated_bytes"] <= before


# --- flags: True or False, never a truthy stand-in -------------------------------------------
JUNK_FLAGS = ["yes", "no", 1, 0, 0.0, [True], None]
FLAG_CALLS: dict[str, Callable[[Any], Any]] = {
    "sum keepdims": lambda v: gp.sum(_a(), axis=0, keepdims=v),
    "mean keepdims": lambda v: _a().mean(keepdims=v),
    "max keepdims": lambda v: gp.max(_a(), axis=1, keepdims=v),
    "argmax keepdims": lambda v: gp.argmax(_a(), keepdims=v),
    "empty evictable": lambda v: gp.empty((4,), evictable=v),
    "from_numpy evictable": lambda v: gp.from_numpy(np.ones(3), evictable=v),
    "astype copy": lambda v: _a().astype("float32", copy=v),
    "to_numpy blocking": lambda v: _a().to_numpy(blocking=v),
    "matmul allow_tf32": lambda v: gp.matmul(_a(), _a((4, 2)), allow_tf32=v),
    "linspace endpoint": lambda v: gp.linspace(0, 1, 5, endpoint=v),
    "Event timing": lambda v: gp.Event(timing=v),
    "setflags write": lambda v: _a().setflags(write=v),
}
FLAG_NAMES = {
    "sum keepdims": "keepdims",
    "mean keepdims": "keepdims",
    "max keepdims": "keepdims",
    "argmax keepdims": "keepdims",
    "empty evictable": "evictable",
    "from_numpy evictable": "evictable",
    "astype copy": "copy",
    "to_numpy blocking": "blocking",
    "matmul allow_tf32": "allow_tf32",
    "linspace endpoint": "endpoint",
    "Event timing": "timing",
    "setflags write": "write",
}


@pytest.mark.parametrize("junk", JUNK_FLAGS, ids=repr)
@pytest.mark.parametrize("call", list(FLAG_CALLS))
def test_flags_must_be_bools(call: str, junk: Any) -> None:
    if junk is None and call in ("matmul allow_tf32", "setflags write"):
        pytest.skip("None is this argument's documented default")
    _run((lambda: FLAG_CALLS[call](junk), TypeError, rf"{FLAG_NAMES[call]} must be"))


@pytest.mark.parametrize("flag", [True, False, np.bool_(True)], ids=repr)
def test_flags_accept_bools(flag: Any) -> None:
    host = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    got = gp.sum(gp.from_numpy(host), axis=0, keepdims=flag).to_numpy()
    np.testing.assert_allclose(got, host.sum(axis=0, keepdims=bool(flag)))


# --- axes: an int (or a tuple of ints) inside the array's rank --------------------------------
AXIS_CASES: dict[str, Case] = {
    "sum axis list": (lambda: gp.sum(_a(), axis=[0]), TypeError, "axis must be None"),
    "sum axis str": (lambda: gp.sum(_a(), axis="0"), TypeError, "axis must be an integer"),
    "sum axis float": (lambda: gp.sum(_a(), axis=0.0), TypeError, "axis must be an integer"),
    "sum axis bool": (lambda: gp.sum(_a(), axis=True), TypeError, "axis must be an integer"),
    "sum axis array": (lambda: gp.sum(_a(), axis=np.arange(2)), TypeError, "axis must be None"),
    "sum axis out of range": (lambda: gp.sum(_a(), axis=2), IndexError, "out of bounds"),
    "sum axis repeated": (lambda: gp.sum(_a(), axis=(0, -2)), ValueError, "repeated axis"),
    "prod axis tuple of str": (lambda: gp.prod(_a(), axis=("0",)), TypeError, "axis"),
    "argmax axis list": (lambda: gp.argmax(_a(), axis=[0]), TypeError, "axis must be an int"),
    "cumsum axis str": (lambda: gp.cumsum(_a(), axis="1"), TypeError, "axis must be an int"),
    "cumsum axis out of range": (lambda: gp.cumsum(_a(), axis=-3), ValueError, "out of bounds"),
    "softmax axis str": (lambda: gp.softmax(_a(), axis="1"), TypeError, "axis must be an int"),
    "concatenate axis str": (
        lambda: gp.concatenate([_a(), _a()], axis="0"),
        TypeError,
        "axis must be an int",
    ),
    "stack axis float": (lambda: gp.stack([_a(), _a()], axis=1.0), TypeError, "axis"),
    "split axis out of range": (lambda: gp.split(_a(), 2, axis=5), IndexError, "out of bounds"),
    "take axis str": (lambda: gp.take(_a(), [0], axis="0"), TypeError, "axis must be an int"),
    "squeeze axis list": (lambda: _a((1, 3)).squeeze(axis=[0]), TypeError, "axis must be"),
    "swapaxes axis str": (lambda: _a().swapaxes("0", 1), TypeError, "axis must be an int"),
    "expand_dims axis float": (lambda: _a().expand_dims(0.5), TypeError, "axis must be an int"),
    "flip axis out of range": (lambda: gp.flip(_a(), 7), ValueError, "out of bounds"),
}


@pytest.mark.parametrize("case", list(AXIS_CASES))
def test_axes_are_checked(case: str) -> None:
    _run(AXIS_CASES[case])


def test_axis_out_of_range_is_numpys_axis_error() -> None:
    with pytest.raises(np.exceptions.AxisError):
        gp.sum(_a(), axis=-3)


# --- sizes and shapes: non-negative integers whose bytes fit a 64-bit size ---------------------
SIZE_CASES: dict[str, Case] = {
    "zeros shape str": (lambda: gp.zeros("10"), TypeError, "shape must be an int"),
    "zeros entry str": (lambda: gp.zeros(("3", 4)), TypeError, "shape entries must be ints"),
    "empty shape float": (lambda: gp.empty(3.0), TypeError, "shape must be an int"),
    "empty shape bool": (lambda: gp.empty(True), TypeError, "shape must be an int"),
    "empty negative": (lambda: gp.empty((2, -1)), ValueError, "negative dimensions"),
    "empty bytes overflow": (lambda: gp.empty((2**40, 2**40)), ValueError, r"shape \(10995116"),
    "empty 2**63 elements": (lambda: gp.empty(2**63), ValueError, "2\\*\\*63 - 1"),
    "zeros 2**62 float64": (lambda: gp.zeros(2**62, "float64"), ValueError, "more than any"),
    "full bytes overflow": (lambda: gp.full((2**61, 8), 1.0), ValueError, "more than any"),
    "ones 65 dimensions": (lambda: gp.ones((1,) * 65), ValueError, "at most 64"),
    "arange infinite length": (lambda: gp.arange(0, 1e308, 1e-308), ValueError, "not finite"),
    "arange too long": (lambda: gp.arange(0, 2**63, 1), ValueError, "more than any"),
    "linspace num str": (lambda: gp.linspace(0, 1, "5"), TypeError, "num must be an integer"),
    "linspace num negative": (lambda: gp.linspace(0, 1, -2), ValueError, "num must be non-neg"),
    "linspace start str": (lambda: gp.linspace("0", 1, 5), TypeError, "start must be a real"),
    "eye N str": (lambda: gp.eye("3"), TypeError, "N must be an integer"),
    "eye M negative": (lambda: gp.eye(3, -1), ValueError, "M must be non-negative"),
    "eye k float": (lambda: gp.eye(3, k=1.5), TypeError, "k must be an integer"),
    "reshape str": (lambda: _a().reshape("12"), TypeError, "shape must be an int"),
    "broadcast_to overflow": (
        lambda: _a((1, 1)).broadcast_to((2**62, 2**62)),
        ValueError,
        "more than any",
    ),
    "var ddof str": (lambda: gp.var(_a(), ddof="1"), TypeError, "ddof must be an integer"),
    "round decimals str": (lambda: gp.round(_a(), "2"), TypeError, "decimals must be an int"),
    "triu k str": (lambda: gp.triu(_a(), "1"), TypeError, "k must be an integer"),
    "split sections float": (lambda: gp.split(_a(), 2.0), TypeError, "indices_or_sections"),
    "fill value out of range": (lambda: gp.full(3, 300, "uint8"), ValueError, "out of range"),
    "Stream priority str": (lambda: gp.Stream(priority="hi"), TypeError, "priority must be an"),
    "Stream priority 99": (lambda: gp.Stream(priority=99), ValueError, "priority must be in"),
    "Stream priority -99": (lambda: gp.Stream(priority=-99), ValueError, "priority must be in"),
}


@pytest.mark.parametrize("case", list(SIZE_CASES))
def test_sizes_and_shapes_are_checked(case: str) -> None:
    _run(SIZE_CASES[case])


def test_sizes_accept_numpy_integers() -> None:
    x = gp.zeros((np.int64(2), np.int32(3)))
    assert x.shape == (2, 3)
    assert gp.linspace(0, 1, np.int16(4)).shape == (4,)
    assert gp.eye(np.uint8(3)).shape == (3, 3)


# --- dtypes ----------------------------------------------------------------------------------
DTYPE_CASES: dict[str, Case] = {
    "empty junk": (lambda: gp.empty(3, dtype="junk"), TypeError, "unsupported dtype 'junk'"),
    "zeros complex": (lambda: gp.zeros(3, dtype="complex64"), TypeError, "unsupported dtype"),
    "sum dtype junk": (lambda: gp.sum(_a(), dtype="junk"), TypeError, "sum: dtype"),
    "cumsum dtype object": (lambda: gp.cumsum(_a(), dtype=object), TypeError, "cumsum: dtype"),
    "astype str list": (lambda: _a().astype(["float32"]), TypeError, "unsupported dtype"),
    "full dtype int": (lambda: gp.full(3, 1.0, dtype=5), TypeError, "full: dtype"),
    "arange dtype junk": (lambda: gp.arange(3, dtype="x"), TypeError, "arange: dtype"),
    "from_numpy text": (lambda: gp.from_numpy(np.array(["a"])), TypeError, "array.dtype"),
}


@pytest.mark.parametrize("case", list(DTYPE_CASES))
def test_dtypes_are_checked(case: str) -> None:
    _run(DTYPE_CASES[case])


# --- streams: a gp.Stream or None ------------------------------------------------------------
JUNK_STREAMS = ["s", 0, 7, object(), np.int64(1)]
STREAM_CALLS: dict[str, Callable[[Any], Any]] = {
    "empty": lambda s: gp.empty(4, stream=s),
    "full": lambda s: gp.full(4, 1.0, stream=s),
    "zeros": lambda s: gp.zeros(4, stream=s),
    "arange": lambda s: gp.arange(4, stream=s),
    "linspace": lambda s: gp.linspace(0, 1, 4, stream=s),
    "from_numpy": lambda s: gp.from_numpy(np.ones(3), stream=s),
    "to_numpy": lambda s: _a().to_numpy(stream=s),
    "Event.record": lambda s: gp.Event().record(s),
    "Stream.wait_stream": lambda s: gp.Stream().wait_stream(s),
    "graph_capture": lambda s: gp.graph_capture(s).__enter__(),
}


@pytest.mark.parametrize("junk", JUNK_STREAMS, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("call", list(STREAM_CALLS))
def test_streams_must_be_streams(call: str, junk: Any) -> None:
    _run((lambda: STREAM_CALLS[call](junk), TypeError, "must be a gp.Stream"))


def test_a_real_stream_is_accepted(rand: Callable[..., np.ndarray]) -> None:
    s = gp.Stream()
    host = rand((5,))
    x = gp.from_numpy(host, stream=s)
    np.testing.assert_array_equal(x.to_numpy(stream=s), host)


# --- arrays and out= ----------------------------------------------------------------------
ARRAY_CASES: dict[str, Case] = {
    "sum of str": (lambda: gp.sum("x"), TypeError, "sum: a must be a GPUArray"),
    "max of list": (lambda: gp.max([1, 2]), TypeError, "a must be a GPUArray"),
    "exp of str": (lambda: gp.exp("x"), TypeError, "unsupported operand type str"),
    "matmul with str": (lambda: gp.matmul(_a(), "x"), TypeError, "for b"),
    "concatenate of array": (lambda: gp.concatenate(_a()), TypeError, "sequence of GPUArrays"),
    "stack with str": (lambda: gp.stack([_a(), "x"]), TypeError, "expects a GPUArray"),
    "to_numpy of list": (lambda: gp.to_numpy([1]), TypeError, "a must be a GPUArray"),
    "from_numpy of list": (lambda: gp.from_numpy([1]), TypeError, "must be a numpy.ndarray"),
    "asarray of object": (lambda: gp.asarray(object()), TypeError, "cannot convert"),
    "asarray ragged": (lambda: gp.asarray([[1], [1, 2]]), ValueError, "cannot convert"),
    "add out str": (lambda: gp.add(_a(), 1, out="x"), TypeError, "out must be a GPUArray"),
    "sum out ndarray": (
        lambda: gp.sum(_a(), axis=0, out=np.zeros(4)),
        TypeError,
        "out must be a GPUArray",
    ),
    "matmul out list": (
        lambda: gp.matmul(_a(), _a((4, 2)), out=[0]),
        TypeError,
        "matmul: out must be",
    ),
    "take out str": (lambda: gp.take(_a(), [0], out="x"), TypeError, "take: out must be"),
    "take mode junk": (lambda: gp.take(_a(), [0], mode="x"), ValueError, "mode must be one of"),
    "wait_event of str": (lambda: gp.Stream().wait_event("e"), TypeError, "event must be"),
}


@pytest.mark.parametrize("case", list(ARRAY_CASES))
def test_array_arguments_are_checked(case: str) -> None:
    _run(ARRAY_CASES[case])


# --- DLPack producers -------------------------------------------------------------------------
class _Producer:
    """A DLPack producer whose two methods return what it is given."""

    def __init__(self, device: Any, capsule: Any) -> None:
        self.device, self.capsule = device, capsule

    def __dlpack_device__(self) -> Any:
        return self.device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule


HOST = 2 if gp.backend_name() == "cuda" else 1
DLPACK_CASES: dict[str, Case] = {
    "str": (lambda: gp.from_dlpack("x"), TypeError, "needs an object with __dlpack__"),
    "int": (lambda: gp.from_dlpack(3), TypeError, "needs an object with __dlpack__"),
    "list": (lambda: gp.from_dlpack([1, 2]), TypeError, "needs an object with __dlpack__"),
    "None": (lambda: gp.from_dlpack(None), TypeError, "needs an object with __dlpack__"),
    "device not a pair": (
        lambda: gp.from_dlpack(_Producer("x", None)),
        TypeError,
        "__dlpack_device__",
    ),
    "device of floats": (
        lambda: gp.from_dlpack(_Producer((1.5, 0), None)),
        TypeError,
        "__dlpack_device__",
    ),
    "capsule None": (
        lambda: gp.from_dlpack(_Producer((HOST, 0), None)),
        TypeError,
        "valid DLPack capsule",
    ),
    "capsule str": (
        lambda: gp.from_dlpack(_Producer((HOST, 0), "junk")),
        TypeError,
        "valid DLPack capsule",
    ),
    "wrong device": (
        lambda: gp.from_dlpack(_Producer((3 - HOST, 0), None)),
        BufferError,
        "DLPack device type",
    ),
}


@pytest.mark.parametrize("case", list(DLPACK_CASES))
def test_from_dlpack_refuses_junk(case: str) -> None:
    _run(DLPACK_CASES[case])


# --- messages never print a whole array --------------------------------------------------------
BIG = np.arange(100_000, dtype=np.float64)
REPR_CASES: dict[str, Callable[[], Any]] = {
    "dtype given an array": lambda: gp.sum(_a(), dtype=BIG),
    "astype given an array": lambda: _a().astype(BIG),
    "full value an array": lambda: gp.full(3, BIG),
    "fill with an array": lambda: _a().fill(BIG),
    "shape an array of floats": lambda: gp.zeros(BIG[:70]),
    "shape of many dims": lambda: gp.zeros(np.ones(1000, dtype=np.int64)),
    "axis an array": lambda: gp.sum(_a(), axis=BIG),
    "flag an array": lambda: gp.sum(_a(), keepdims=BIG),
    "stream an array": lambda: gp.empty(3, stream=BIG),
    "from_numpy of a list": lambda: gp.from_numpy(BIG.tolist()),
    "out an array": lambda: gp.add(_a(), 1.0, out=BIG),
    "dlpack of a list": lambda: gp.from_dlpack(BIG.tolist()),
    "asarray of objects": lambda: gp.asarray([object()] * 10_000),
    "take mode an array": lambda: gp.take(_a(), [0], mode=BIG),
}


@pytest.mark.parametrize("case", list(REPR_CASES))
def test_messages_never_print_a_whole_array(case: str) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        REPR_CASES[case]()
    message = str(info.value)
    assert len(message) < 400, message
    assert "99999" not in message and "1., 1., 1." not in message


def test_describe_is_short() -> None:
    assert validation.describe(BIG) == "a numpy.ndarray of shape (100000,) and dtype float64"
    assert validation.describe("x" * 1000).endswith("...")
    assert validation.describe(list(range(10**5))) == "a list of 100000 items"
    assert "GPUArray of shape (3, 4)" in validation.describe(_a())
