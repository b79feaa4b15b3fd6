// Reductions, softmax, cumsum, take and triu/tril on the GPU (kernels: native/kernels/reduce.cu,
// softmax.cu, scan.cu, gather.cu). Arguments are validated in Python first (pygpukit.reductions,
// pygpukit.shape_ops); these re-check what would otherwise read out of bounds and throw
// std::invalid_argument. No function synchronizes.
#pragma once

#include <string>
#include <vector>

#include "core/array.hpp"
#include "core/stream.hpp"

namespace pgk {

// Reduce the non-empty `a` over `axes` (distinct, in [0, ndim)) with `op`: sum, prod, mean, var,
// std, max, min, argmax, argmin (one axis), all, any. Returns an array without the reduced axes
// in the accumulator type: float32 for float32/16/bfloat16 inputs, float64 for float64 (and for
// mean/var/std of integers), int64 for sum/prod of integers and bools, the input type for
// max/min (float32 for half types; uint8 for bools), int64 for argmax/argmin, uint8 0/1 for
// all/any. The caller casts to the result dtype. The result may be a non-contiguous view.
Array reduce(const std::string& op, const Array& a, const std::vector<int>& axes, int ddof,
             const StreamPtr& stream);

// Softmax (log_softmax when `log`) along `axis` of a floating array, in its dtype.
Array softmax(const Array& a, int axis, bool log, const StreamPtr& stream);

// Inclusive prefix sum along `axis`: float types keep their dtype, integers and bools give int64.
Array cumsum(const Array& a, int axis, const StreamPtr& stream);

// a gathered along `axis` at the 1-D int64 `indices` (mode 0: negatives from the end, range
// checked by the caller; 1: wrap; 2: clip). Shape: a.shape with axis replaced by indices.size.
Array take(const Array& a, const Array& indices, int axis, int mode, const StreamPtr& stream);

// triu (upper) / tril of the last two axes (ndim >= 2) into a new C-contiguous array.
Array tri(const Array& a, long long k, bool upper, const StreamPtr& stream);

}  // namespace pgk
