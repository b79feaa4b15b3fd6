// A TMA descriptor (CUtensorMap) for a kernel parameter passed by value: what the driver's
// cuTensorMapEncodeTiled writes for a tiled view of one device array. Hopper and later kernels
// load and store boxes of the array with cp.async.bulk.tensor through it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "core/array.hpp"

namespace pgk {

// Swizzle of the box in shared memory (CU_TENSOR_MAP_SWIZZLE_*): 0 none, else 32, 64 or 128
// bytes, the width of the swizzle pattern; the box's innermost extent must fit in it.
class TensorMap {
  public:
    // `box`: elements per dimension, outermost first like the array's shape. Throws
    // std::invalid_argument (ValueError) for a layout TMA cannot describe, before any driver
    // call; CudaError when the driver refuses or lacks cuTensorMapEncodeTiled.
    TensorMap(const Array& array, const Dims& box, int swizzle_bytes);

    const CUtensorMap& map() const { return map_; }
    const BufferPtr& buffer() const { return buffer_; }
    int device() const { return device_; }
    const Dims& box() const { return box_; }

  private:
    CUtensorMap map_;   // 64-byte aligned by its type
    BufferPtr buffer_;  // the array's memory stays alive while the map can be launched with
    int device_;
    Dims box_;
};

}  // namespace pgk
