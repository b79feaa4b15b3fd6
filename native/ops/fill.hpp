// Fill an array (contiguous or strided) with one value.
#pragma once

#include <pybind11/pybind11.h>

#include "core/array.hpp"

namespace pgk {

void fill(const Array& a, pybind11::handle value, const StreamPtr& stream);

}  // namespace pgk
