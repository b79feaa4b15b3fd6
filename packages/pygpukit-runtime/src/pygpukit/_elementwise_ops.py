"""Elementwise op codes shared by Python and ``_native`` (``native/ops/elementwise.hpp``).

The position of a name in :data:`BINARY_OPS` / :data:`UNARY_OPS` is the code the
backends' ``binary(op, a, b, out)`` / ``unary(op, a, out)`` take; keep the order
in step with the C++ enums.
"""

from __future__ import annotations

BINARY_OPS: tuple[str, ...] = (
    "add",
    "subtract",
    "multiply",
    "divide",
    "floor_divide",
    "mod",
    "power",
    "maximum",
    "minimum",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "left_shift",
    "right_shift",
)

UNARY_OPS: tuple[str, ...] = (
    "negative",
    "positive",
    "abs",
    "exp",
    "exp2",
    "log",
    "log2",
    "log10",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "square",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "relu",
    "gelu_tanh",
    "gelu_erf",
    "silu",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sign",
    "isnan",
    "isinf",
    "isfinite",
    "logical_not",
    "invert",
)

#: name -> code
BINARY: dict[str, int] = {name: i for i, name in enumerate(BINARY_OPS)}
UNARY: dict[str, int] = {name: i for i, name in enumerate(UNARY_OPS)}
