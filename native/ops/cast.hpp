// astype: element type conversion into a new C-contiguous array, and arange.
#pragma once

#include <pybind11/pybind11.h>

#include "core/array.hpp"

namespace pgk {

Array astype(const Array& a, DType dtype, const StreamPtr& stream);

// start + i * step for i in [0, n); start/step are Python numbers (ints stay exact for integer
// dtypes).
Array arange(pybind11::handle start, pybind11::handle step, int64_t n, DType dtype,
             const StreamPtr& stream);

}  // namespace pgk
