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

// The elementwise ops, each named once. The enums below, the kernel names (ew_<op>_<dtype>,
// un_<op>_<dtype>) and the lists exported to Python (_native.BINARY_OPS / UNARY_OPS, which the
// CPU backend is tested against) all expand these lists. Python passes an op by name; the code
// (the position here) never leaves C++.
// clang-format off
#define PGK_BINARY_OPS(X) \
    X(add) X(subtract) X(multiply) X(divide) X(floor_divide) X(mod) \
    X(power) X(maximum) X(minimum) X(equal) X(not_equal) X(less) \
    X(less_equal) X(greater) X(greater_equal) X(logical_and) X(logical_or) X(logical_xor) \
    X(bitwise_and) X(bitwise_or) X(bitwise_xor) X(left_shift) X(right_shift)
#define PGK_UNARY_OPS(X) \
    X(negative) X(positive) X(abs) X(exp) X(exp2) X(log) X(log2) X(log10) \
    X(log1p) X(expm1) X(sqrt) X(rsqrt) X(square) X(reciprocal) X(sin) X(cos) \
    X(tan) X(tanh) X(sigmoid) X(relu) X(gelu_tanh) X(gelu_erf) X(silu) X(floor) \
    X(ceil) X(round) X(trunc) X(sign) X(isnan) X(isinf) X(isfinite) X(logical_not) \
    X(invert)
// clang-format on

#define PGK_OP_ENUMERATOR(op) op,
enum class BinaryOp : int { PGK_BINARY_OPS(PGK_OP_ENUMERATOR) count };
enum class UnaryOp : int { PGK_UNARY_OPS(PGK_OP_ENUMERATOR) count };
#undef PGK_OP_ENUMERATOR

constexpr int kNumBinaryOps = static_cast<int>(BinaryOp::count);
constexpr int kNumUnaryOps = static_cast<int>(UnaryOp::count);
extern const char* const kBinaryOpNames[kNumBinaryOps];
extern const char* const kUnaryOpNames[kNumUnaryOps];

// The result dtype of an elementwise op on operands of dtypes a and b (NumPy 2 promotion;
// bfloat16 as docs/elementwise.md says). Exported to Python as _native.PROMOTION.
DType promote(DType a, DType b);

// a <op> b; a and b are Arrays or scalars (Python bool/int/float: weak; NumPy scalars: strong),
// at least one an Array. `out` is None or an Array (same_kind casting into it). Returns the
// result (`out` itself when given).
pybind11::object binary(int op, pybind11::handle a, pybind11::handle b, pybind11::handle out);
pybind11::object unary(int op, pybind11::handle a, pybind11::handle out);
pybind11::object where(pybind11::handle cond, pybind11::handle x, pybind11::handle y,
                       pybind11::handle out);

}  // namespace pgk
