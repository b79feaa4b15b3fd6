#include "jit/tensor_map.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/errors.hpp"

namespace pgk {

namespace {

CUtensorMapDataType tma_dtype(DType t) {
    switch (t) {
        case DType::f64:
            return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
        case DType::f32:
            return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
        case DType::f16:
            return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
        case DType::bf16:
            return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        case DType::i32:
            return CU_TENSOR_MAP_DATA_TYPE_INT32;
        case DType::i64:
            return CU_TENSOR_MAP_DATA_TYPE_INT64;
        case DType::u8:
        case DType::i8:
        case DType::b1:
            return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // bytes are bytes for a copy
        case DType::i16:
            return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    }
    throw std::invalid_argument("tensor map: unsupported dtype");
}

CUtensorMapSwizzle tma_swizzle(int bytes) {
    switch (bytes) {
        case 0:
            return CU_TENSOR_MAP_SWIZZLE_NONE;
        case 32:
            return CU_TENSOR_MAP_SWIZZLE_32B;
        case 64:
            return CU_TENSOR_MAP_SWIZZLE_64B;
        case 128:
            return CU_TENSOR_MAP_SWIZZLE_128B;
    }
    throw std::invalid_argument("tensor map: swizzle must be 0, 32, 64 or 128 bytes, got " +
                                std::to_string(bytes));
}

[[noreturn]] void bad(const std::string& what) {
    throw std::invalid_argument("tensor map: " + what);
}

}  // namespace

TensorMap::TensorMap(const Array& array, const Dims& box, int swizzle_bytes)
    : buffer_(array.buffer()), device_(array.device()), box_(box) {
    const int rank = array.ndim();
    const int64_t item = array.itemsize();
    if (rank < 1 || rank > 5)
        bad("the array must have 1 to 5 dimensions, it has " + std::to_string(rank));
    if (static_cast<int>(box.size()) != rank) {
        bad("box has " + std::to_string(box.size()) + " dimensions, the array " +
            std::to_string(rank));
    }
    if (array.buffer()->evictable()) {
        bad("the array is evictable: the map holds its address, which may change when the pool "
            "spills it; use a non-evictable array");
    }
    if (array.size() == 0) bad("the array is empty");
    if (array.strides()[rank - 1] != item) bad("the innermost dimension must be contiguous");
    const CUtensorMapSwizzle swizzle = tma_swizzle(swizzle_bytes);
    // The driver counts dimensions innermost first; strides exclude the innermost (unit) one.
    cuuint64_t dims[5], strides[4];
    cuuint32_t boxes[5], elem_strides[5];
    for (int i = 0; i < rank; ++i) {
        const int src = rank - 1 - i;
        if (box[src] < 1 || box[src] > 256) {
            bad("box extents must be 1 to 256, dimension " + std::to_string(src) + " is " +
                std::to_string(box[src]));
        }
        if (array.shape()[src] > (int64_t{1} << 31)) {
            bad("dimension " + std::to_string(src) + " has " + std::to_string(array.shape()[src]) +
                " elements, TMA allows at most 2**31");
        }
        dims[i] = static_cast<cuuint64_t>(array.shape()[src]);
        boxes[i] = static_cast<cuuint32_t>(box[src]);
        elem_strides[i] = 1;
        if (i > 0) {
            // An extent-1 dimension's stride is never used (x[None] may carry any stride): give
            // the driver one it accepts, the span of the next inner dimension.
            const int64_t inner_span =
                array.shape()[src + 1] * (i == 1 ? item : static_cast<int64_t>(strides[i - 2]));
            const int64_t s = array.shape()[src] == 1
                                  ? std::max<int64_t>(16, (inner_span + 15) / 16 * 16)
                                  : array.strides()[src];
            if (s <= 0 || s % 16 != 0 || s >= (int64_t{1} << 40)) {
                bad("the byte stride of dimension " + std::to_string(src) + " (" +
                    std::to_string(s) + ") must be a positive multiple of 16 below 2**40");
            }
            strides[i - 1] = static_cast<cuuint64_t>(s);
        }
    }
    const int64_t inner_bytes = box[rank - 1] * item;
    if (inner_bytes % 16 != 0) {
        bad("the box's innermost extent must span a multiple of 16 bytes, it spans " +
            std::to_string(inner_bytes));
    }
    if (swizzle_bytes != 0 && inner_bytes > swizzle_bytes) {
        bad("with a " + std::to_string(swizzle_bytes) +
            "-byte swizzle the box's innermost extent "
            "may span at most that many bytes, it spans " +
            std::to_string(inner_bytes));
    }
    const uint64_t address = array.data_ptr();
    if (address % 16 != 0) bad("the array's address must be 16-byte aligned");
    if (drv().cuTensorMapEncodeTiled == nullptr) {
        throw CudaError(CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
                        "this driver lacks cuTensorMapEncodeTiled (CUDA 12.0 or newer needed)");
    }
    bind_device(device_);  // the driver wants a context current: the array's device's
    check(drv().cuTensorMapEncodeTiled(
              &map_, tma_dtype(array.dtype()), static_cast<cuuint32_t>(rank),
              reinterpret_cast<void*>(address), dims, strides, boxes, elem_strides,
              CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "cuTensorMapEncodeTiled");
}

}  // namespace pgk
