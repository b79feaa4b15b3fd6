"""View arithmetic on ``(shape, strides, offset)``, shared by every backend.

Strides and offsets are in bytes. Each function validates its arguments the
way NumPy does (same exception types, similar messages) and returns the
metadata of a view of the same buffer; the caller turns it into an array with
one ``backend.view(impl, shape, strides, offset)`` call.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "basic_index",
    "broadcast_shapes",
    "broadcast_to",
    "c_strides",
    "expand_dims",
    "is_c_contiguous",
    "normalize_axis",
    "normalize_shape",
    "reshape",
    "squeeze",
    "transpose",
]

Shape = tuple[int, ...]


#: NumPy's limit on the number of dimensions.
MAX_NDIM = 64
#: The most elements a shape may have: sizes are 64-bit signed in C++ and Rust.
MAX_ELEMENTS = 2**63 - 1


def _short(value: Any) -> str:
    """A repr for an error message, cut short (a shape could be a long list or an array)."""
    if isinstance(value, np.ndarray):
        return f"a numpy.ndarray of shape {value.shape}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dimension(d: Any, name: str, shape: Any) -> int:
    if not isinstance(d, (bool, np.bool_)):
        try:
            return operator.index(d)
        except TypeError:
            pass
    raise TypeError(f"{name} entries must be ints, got {_short(d)} in {_short(shape)}")


def normalize_shape(shape: Any, name: str = "shape") -> Shape:
    """``shape`` (an int or a sequence of ints) as a tuple; errors like NumPy's.

    ``TypeError`` for non-integers (strings included), ``ValueError`` for negative sizes,
    more than 64 dimensions, or more than 2**63 - 1 elements in all.
    """
    # Fast path for what nearly every call passes, a tuple of non-negative Python ints or one
    # such int (``type(...) is int`` excludes bool): ~0.1 us instead of ~0.7 us through the
    # general validation below, which gives the same result and handles everything else. The
    # element-count bound is checked by the creation functions with the dtype's item size.
    if type(shape) is tuple:
        for d in shape:
            if type(d) is not int or d < 0:
                break
        else:
            if len(shape) <= MAX_NDIM:
                return shape
    elif type(shape) is int and shape >= 0:
        return (shape,)
    if isinstance(shape, (bool, np.bool_, str, bytes)) or shape is None:
        raise TypeError(f"{name} must be an int or a tuple of ints, got {_short(shape)}")
    try:
        dims: tuple[int, ...] = (operator.index(shape),)
    except TypeError:
        if not isinstance(shape, Sequence) and not hasattr(shape, "__iter__"):
            raise TypeError(
                f"{name} must be an int or a tuple of ints, got {type(shape).__name__}"
            ) from None
        dims_list = []
        for d in shape:
            dims_list.append(_dimension(d, name, shape))
            if len(dims_list) > MAX_NDIM:
                break
        dims = tuple(dims_list)
    if len(dims) > MAX_NDIM:
        raise ValueError(f"{name} has {len(dims)} dimensions; at most {MAX_NDIM} are supported")
    total = 1
    for d in dims:
        if d < 0:
            raise ValueError(f"negative dimensions are not allowed: {name} {dims}")
        total *= d
    if total > MAX_ELEMENTS:
        raise ValueError(
            f"{name} {dims} has {total} elements, more than any device can address (2**63 - 1)"
        )
    return dims


def c_strides(shape: Shape, itemsize: int) -> Shape:
    """Strides of a C-contiguous array of ``shape``."""
    strides = []
    step = itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def is_c_contiguous(shape: Shape, strides: Shape, itemsize: int) -> bool:
    """True when the layout is C-contiguous (dimensions of size 1 may have any stride)."""
    if 0 in shape:
        return True
    step = itemsize
    for d, s in zip(reversed(shape), reversed(strides), strict=True):
        if d != 1 and s != step:
            return False
        step *= d
    return True


def normalize_axis(axis: Any, ndim: int, name: str = "axis") -> int:
    """``axis`` in ``[0, ndim)``, negatives counted from the end.

    ``TypeError`` for a non-integer (a bool, a float, a string, a list); NumPy's ``AxisError``
    (a ``ValueError`` and an ``IndexError``) when out of range.
    """
    if type(axis) is not int:
        if isinstance(axis, (bool, np.bool_)) or not hasattr(axis, "__index__"):
            raise TypeError(f"{name} must be an int, got {_short(axis)}")
        axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim, name if name != "axis" else None)
    return axis + ndim if axis < 0 else axis


def _axes_tuple(axis: Any, ndim: int, lists: bool = True) -> tuple[int, ...]:
    """One axis or a tuple of distinct axes (a list too when ``lists``, as NumPy's expand_dims)."""
    if isinstance(axis, list) and not lists:
        raise TypeError(f"axis must be an int or a tuple of ints, got a list ({_short(axis)})")
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = tuple(normalize_axis(a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {_short(axis)}")
    return out


def basic_index(
    shape: Shape, strides: Shape, offset: int, key: Any
) -> tuple[Shape, Shape, int, bool]:
    """Apply a basic index (ints, slices, ``...``, ``None``) to a layout.

    Returns ``(shape, strides, offset, scalar)`` where ``scalar`` is True when
    every dimension was indexed by an integer (a 0-d result NumPy would return
    as a scalar). ``IndexError`` for out-of-range integers or too many indices;
    ``TypeError`` for index types other than the basic ones (lists, arrays, bools).
    """
    items = key if isinstance(key, tuple) else (key,)
    start_offset = offset
    n_ellipsis = sum(1 for k in items if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
    ndim = len(shape)
    if consumed > ndim:
        raise IndexError(
            f"too many indices for array: array is {ndim}-dimensional, but {consumed} were indexed"
        )
    new_shape: list[int] = []
    new_strides: list[int] = []
    dim = 0
    all_ints = n_ellipsis == 0 and consumed == ndim
    for k in items:
        if k is None:
            new_shape.append(1)
            new_strides.append(0)
            all_ints = False
        elif k is Ellipsis:
            for _ in range(ndim - consumed):
                new_shape.append(shape[dim])
                new_strides.append(strides[dim])
                dim += 1
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[dim])
            length = len(range(start, stop, step))
            new_shape.append(length)
            new_strides.append(strides[dim] * step)
            if length:
                offset += start * strides[dim]
            dim += 1
            all_ints = False
        else:
            if isinstance(k, bool) or type(k).__name__ == "bool_":
                raise TypeError(
                    "boolean indices are not supported; PyGPUkit supports basic indexing "
                    "(integers, slices, ..., None)"
                )
            try:
                i = operator.index(k)
            except TypeError:
                raise TypeError(
                    f"unsupported index {k!r} of type {type(k).__name__}; PyGPUkit supports "
                    "basic indexing (integers, slices, ..., None)"
                ) from None
            n = shape[dim]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            offset += (i + n if i < 0 else i) * strides[dim]
            dim += 1
    while dim < ndim:
        new_shape.append(shape[dim])
        new_strides.append(strides[dim])
        dim += 1
    if 0 in new_shape:
        offset = start_offset  # an empty view touches nothing; keep it inside the buffer
    return tuple(new_shape), tuple(new_strides), offset, all_ints


def _resolve_newshape(size: int, newshape: Shape) -> Shape:
    unknown = [i for i, d in enumerate(newshape) if d == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension (-1)")
    if any(d < -1 for d in newshape):
        raise ValueError(f"negative dimensions are not allowed: shape {newshape}")
    known = 1
    for d in newshape:
        if d != -1:
            known *= d
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape {newshape}")
        newshape = tuple(size // known if d == -1 else d for d in newshape)
    elif known != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {newshape}")
    return newshape


def reshape(
    shape: Shape, strides: Shape, itemsize: int, newshape: Any
) -> tuple[Shape, Shape | None]:
    """The resolved new shape, and its strides when a view can express it (else ``None``).

    ``newshape`` may hold one ``-1``. ``ValueError`` when the sizes differ. The
    stride search is NumPy's ``_attempt_nocopy_reshape``: a view exists when each
    group of merged or split axes is contiguous within itself.
    """
    if isinstance(newshape, (tuple, list)):
        dims = []
        for d in newshape:
            if isinstance(d, bool):
                raise TypeError(f"shape entries must be ints, got {d!r}")
            try:
                dims.append(operator.index(d))
            except TypeError:
                raise TypeError(f"shape entries must be ints, got {d!r}") from None
        target = tuple(dims)
    else:
        try:
            target = (operator.index(newshape),)
        except TypeError:
            raise TypeError(f"shape must be an int or a tuple of ints, got {newshape!r}") from None
    size = 1
    for d in shape:
        size *= d
    target = _resolve_newshape(size, target)
    if size == 0 or is_c_contiguous(shape, strides, itemsize):
        return target, c_strides(target, itemsize)
    # Drop size-1 axes; they constrain nothing.
    old = [(d, s) for d, s in zip(shape, strides, strict=True) if d != 1]
    olddims = [d for d, _ in old]
    oldstrides = [s for _, s in old]
    newstrides = [0] * len(target)
    oi, oj, ni, nj = 0, 1, 0, 1
    n_old, n_new = len(olddims), len(target)
    while ni < n_new and oi < n_old:
        np_ = target[ni]
        op = olddims[oi]
        while np_ != op:
            if np_ < op:
                np_ *= target[nj]
                nj += 1
            else:
                op *= olddims[oj]
                oj += 1
        for ok in range(oi, oj - 1):
            if oldstrides[ok] != olddims[ok + 1] * oldstrides[ok + 1]:
                return target, None
        newstrides[nj - 1] = oldstrides[oj - 1]
        for nk in range(nj - 1, ni, -1):
            newstrides[nk - 1] = newstrides[nk] * target[nk]
        ni, nj = nj, nj + 1
        oi, oj = oj, oj + 1
    last = newstrides[ni - 1] if ni >= 1 else itemsize
    for nk in range(ni, n_new):  # trailing size-1 axes
        newstrides[nk] = last
    return target, tuple(newstrides)


def transpose(shape: Shape, strides: Shape, axes: Sequence[Any] | None) -> tuple[Shape, Shape]:
    """Permute axes (reverse them when ``axes`` is None); ``ValueError`` if not a permutation."""
    ndim = len(shape)
    if axes is None:
        perm: tuple[int, ...] = tuple(range(ndim - 1, -1, -1))
    else:
        if len(axes) != ndim:
            raise ValueError(f"axes {tuple(axes)!r} don't match an array of dimension {ndim}")
        perm = tuple(normalize_axis(a, ndim) for a in axes)
        if sorted(perm) != list(range(ndim)):
            raise ValueError(f"axes {tuple(axes)!r} are not a permutation of range({ndim})")
    return tuple(shape[p] for p in perm), tuple(strides[p] for p in perm)


def squeeze(shape: Shape, strides: Shape, axis: Any = None) -> tuple[Shape, Shape]:
    """Remove size-1 axes (all of them, or those named); ``ValueError`` for a size > 1 axis."""
    if axis is None:
        keep = [i for i, d in enumerate(shape) if d != 1]
    else:
        drop = _axes_tuple(axis, len(shape), lists=False)
        for a in drop:
            if shape[a] != 1:
                raise ValueError(
                    f"cannot select an axis to squeeze out which has size not equal to one "
                    f"(axis {a} has size {shape[a]})"
                )
        keep = [i for i in range(len(shape)) if i not in drop]
    return tuple(shape[i] for i in keep), tuple(strides[i] for i in keep)


def expand_dims(shape: Shape, strides: Shape, axis: Any) -> tuple[Shape, Shape]:
    """Insert size-1 axes at the positions ``axis`` names in the result."""
    out_ndim = len(shape) + (len(axis) if isinstance(axis, (tuple, list)) else 1)
    axes = _axes_tuple(axis, out_ndim)
    src = iter(zip(shape, strides, strict=True))
    new_shape, new_strides = [], []
    for i in range(out_ndim):
        if i in axes:
            new_shape.append(1)
            new_strides.append(0)
        else:
            d, s = next(src)
            new_shape.append(d)
            new_strides.append(s)
    return tuple(new_shape), tuple(new_strides)


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy's broadcast of several shapes; ``ValueError`` when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -i:
                d = s[i]
                if d != 1:
                    if size not in (1, d):
                        raise ValueError(
                            "shapes "
                            + ", ".join(map(str, shapes))
                            + " cannot be broadcast together"
                        )
                    size = d
        out.append(size)
    return tuple(out)


def broadcast_to(shape: Shape, strides: Shape, newshape: Any) -> tuple[Shape, Shape]:
    """A read view of ``shape`` broadcast to ``newshape`` (zero strides on repeated axes)."""
    target = normalize_shape(newshape)
    if math.prod(target) > MAX_ELEMENTS:
        raise ValueError(
            f"cannot broadcast to {target}: more than any device can address (2**63 - 1 elements)"
        )
    if len(target) < len(shape):
        raise ValueError(
            f"cannot broadcast shape {shape} to {target}: the target has fewer dimensions"
        )
    lead = len(target) - len(shape)
    new_strides = [0] * lead
    for d, s, t in zip(shape, strides, target[lead:], strict=True):
        if d == 1:
            new_strides.append(0)  # NumPy's choice for every size-1 source axis
        elif d == t:
            new_strides.append(s)
        else:
            raise ValueError(f"cannot broadcast shape {shape} to {target}")
    return target, tuple(new_strides)
