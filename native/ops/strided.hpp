// Host side of the strided-copy kernel (kernels/copy.cu): layout building with dimension
// coalescing, and the launch.
#pragma once

#include <cstdint>

#include "core/array.hpp"
#include "core/stream.hpp"

namespace pgk {

constexpr int kMaxStridedDims = 8;

// Must match StridedLayout in native/kernels/copy.cu.
struct StridedLayout {
    int ndim;
    long long shape[kMaxStridedDims];
    long long dst_strides[kMaxStridedDims];
    long long src_strides[kMaxStridedDims];
};

// dst[idx] = src[idx] for every index of `shape` (byte strides on both sides; a zero source
// stride broadcasts). Dimensions of extent 1 are dropped and neighbours that are contiguous on
// both sides merged; more than 8 remaining dimensions is a std::invalid_argument.
void strided_copy(uint64_t dst, const Dims& dst_strides, uint64_t src, const Dims& src_strides,
                  const Dims& shape, int itemsize, const Stream& stream);

}  // namespace pgk
