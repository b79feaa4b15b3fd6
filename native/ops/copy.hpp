// Copies between host and device and between arrays (strided, cross-device), and contiguous().
#pragma once

#include <pybind11/numpy.h>

#include "core/array.hpp"
#include "core/stream.hpp"

namespace pgk {

// dst <- host ndarray of the same shape and dtype (by NumPy dtype name, so ml_dtypes.bfloat16
// matches "bfloat16"). blocking: returns once the data is on the device. Otherwise the host data
// is staged through pinned memory and the call returns at once (the ndarray may be reused).
void copy_from_host(const Array& dst, pybind11::array host, const StreamPtr& stream, bool blocking);
// host (C-contiguous, writeable, same shape and dtype) <- src; waits with the GIL released.
void copy_to_host(const Array& src, pybind11::array host, const StreamPtr& stream);
// dst <- src (same shape and dtype), any layouts, same or different devices; no host sync.
void copy_device(const Array& dst, const Array& src, const StreamPtr& stream);
// `a` itself when C-contiguous, else a C-contiguous copy.
Array contiguous(const Array& a, const StreamPtr& stream);

// Shape and dtype checks shared by the copies: std::invalid_argument on mismatch.
void check_same_shape(const Dims& a, const Dims& b, const char* what);

}  // namespace pgk
