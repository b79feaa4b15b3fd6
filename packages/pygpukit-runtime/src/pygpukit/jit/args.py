"""Argument binding and validation of kernel launches, with errors that name the parameter.

The launch itself packs arguments in C++ by each parameter's type code and raises a bare
``TypeError`` on a mismatch; these checks run only then (and on a wrong count or name), so
a correct launch pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .signature import Param

__all__ = ["MISSING", "bind", "check_arguments", "dim3"]

_INT_CODES = {"i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64"}
_INT_RANGES = {
    "i8": (-(2**7), 2**7 - 1),
    "u8": (0, 2**8 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "u16": (0, 2**16 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "u32": (0, 2**32 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u64": (0, 2**64 - 1),
}


def dim3(value: Any, what: str) -> tuple[int, int, int]:
    """A grid or block (an int or 1-3 positive ints) as 3 ints; ``ValueError`` naming ``what``."""
    if type(value) is int and value > 0:  # the common case, without the generic checks
        return (value, 1, 1)
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(isinstance(d, bool) or int(d) != d or d < 1 for d in dims):
        raise ValueError(f"{what} must be a positive int or 1-3 positive ints, got {value!r}")
    padded = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    return padded  # type: ignore[return-value]


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()


def bind(
    signature: Callable[[], str],
    params: Sequence[Param],
    index: dict[str, int],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[Any, ...]:
    """The arguments of one call in declaration order: positional, then by name.

    ``TypeError`` (with the kernel's signature text, built by ``signature()`` only then) for
    too many arguments, an unknown or repeated name, or a missing argument.
    """
    n = len(params)
    if not kwargs and len(args) == n:
        return args
    if len(args) > n:
        raise TypeError(f"{signature()} takes {n} argument(s) but {len(args)} were given")
    values: list[Any] = list(args) + [MISSING] * (n - len(args))
    for key, value in kwargs.items():
        i = index.get(key)
        if i is None:
            raise TypeError(f"{signature()} has no parameter named {key!r}")
        if values[i] is not MISSING:
            raise TypeError(f"{signature()} got parameter {key!r} twice")
        values[i] = value
    missing = [params[i].name for i, v in enumerate(values) if v is MISSING]
    if missing:
        raise TypeError(f"{signature()} is missing argument(s) for: {', '.join(missing)}")
    return tuple(values)


def check_arguments(kernel: str, params: Sequence[Param], values: Sequence[Any]) -> None:
    """Raise ``TypeError`` naming the first argument that does not fit its parameter."""
    from ..array import GPUArray
    from .kernel import TensorMap

    if len(values) != len(params):
        raise TypeError(f"{kernel} takes {len(params)} arguments, got {len(values)}")
    for p, v in zip(params, values, strict=True):
        ok: bool
        if p.code == "ptr":
            ok = isinstance(v, GPUArray) or (isinstance(v, int) and not isinstance(v, bool))
            want = "a GPUArray (or an int device address)"
        elif p.code == "bool":
            ok = isinstance(v, (bool, np.bool_))
            want = "a bool"
        elif p.code == "tmap":
            ok = isinstance(v, TensorMap)
            want = "a gp.TensorMap"
        elif p.code in _INT_CODES:
            ok = isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
            lo, hi = _INT_RANGES[p.code]
            ok = ok and lo <= int(v) <= hi
            want = f"an int in [{lo}, {hi}]"
        else:
            ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
                v, (bool, np.bool_)
            )
            want = "a real number"
        if not ok:
            raise TypeError(
                f"argument for parameter {p.name!r} ({p.ctype}) of {kernel} must be "
                f"{want}, got {type(v).__name__} {v!r}"
            )
