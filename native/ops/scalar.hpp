// Python scalars (int, float, bool, NumPy scalars) converted to the bit pattern of a device type,
// for fill() and for kernel arguments. Caller mistakes raise TypeError before anything is enqueued.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace pgk {

enum class ScalarKind : uint8_t { signed_int, unsigned_int, floating, half, bfloat16, boolean };

// The value as `kind` in `size` bytes (1, 2, 4 or 8), little-endian in the low bytes of the
// result. Throws pybind11::type_error naming `what` when the object is not a usable number.
uint64_t scalar_bits(pybind11::handle value, ScalarKind kind, int size, const char* what);

// The same for an Array element type.
uint64_t scalar_bits(pybind11::handle value, DType dtype, const char* what);

}  // namespace pgk
