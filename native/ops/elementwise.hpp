// Elementwise ops (kernels/elementwise.cu): dtype promotion (NumPy 2 rules, weak Python scalars),
// broadcasting, output allocation and the launch, all before returning to Python. Caller
// mistakes raise TypeError / ValueError before anything is enqueued.
#pragma once

#include <pybind11/pybind11.h>

#include "core/array.hpp"

namespace pgk {

constexpr int kMaxElementwiseDims = 8;

// Must match EwLayout in native/kernels/elementwise.cu.
struct EwLayout {
    int ndim;
    long long shape[kMaxElementwiseDims];
    long long strides[4][kMaxElementwiseDims];  // element strides: output, then inputs
};

// Op codes shared with pygpukit/elementwise.py (BINARY_OPS / UNARY_OPS, in this order).
enum class BinaryOp : int {
    add,
    subtract,
    multiply,
    divide,
    floor_divide,
    mod,
    power,
    maximum,
    minimum,
    equal,
    not_equal,
    less,
    less_equal,
    greater,
    greater_equal,
    logical_and,
    logical_or,
    logical_xor,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    left_shift,
    right_shift,
    count
};
enum class UnaryOp : int {
    negative,
    positive,
    abs,
    exp,
    exp2,
    log,
    log2,
    log10,
    log1p,
    expm1,
    sqrt,
    rsqrt,
    square,
    reciprocal,
    sin,
    cos,
    tan,
    tanh,
    sigmoid,
    relu,
    gelu_tanh,
    gelu_erf,
    silu,
    floor,
    ceil,
    round,
    trunc,
    sign,
    isnan,
    isinf,
    isfinite,
    logical_not,
    invert,
    count
};

// a <op> b; a and b are Arrays or scalars (Python bool/int/float: weak; NumPy scalars: strong),
// at least one an Array. `out` is None or an Array (same_kind casting into it). Returns the
// result (`out` itself when given).
pybind11::object binary(int op, pybind11::handle a, pybind11::handle b, pybind11::handle out);
pybind11::object unary(int op, pybind11::handle a, pybind11::handle out);
pybind11::object where(pybind11::handle cond, pybind11::handle x, pybind11::handle y,
                       pybind11::handle out);

}  // namespace pgk
