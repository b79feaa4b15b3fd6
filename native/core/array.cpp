#include "core/array.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pgk {

namespace {

void check_layout(const Dims& shape, const Dims& strides, int64_t offset, int item,
                  uint64_t buffer_bytes) {
    if (shape.size() != strides.size()) {
        throw std::invalid_argument("view: shape has " + std::to_string(shape.size()) +
                                    " dimensions, strides " + std::to_string(strides.size()));
    }
    if (offset < 0 || offset % item != 0) {
        throw std::invalid_argument("view: offset " + std::to_string(offset) +
                                    " is negative or not a multiple of the itemsize");
    }
    int64_t low = offset, high = offset;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (strides[d] % item != 0) {
            throw std::invalid_argument("view: stride " + std::to_string(strides[d]) +
                                        " is not a multiple of the itemsize " +
                                        std::to_string(item));
        }
        if (shape[d] == 0) return;  // an empty view touches no memory
        const int64_t extent = (shape[d] - 1) * strides[d];
        (extent < 0 ? low : high) += extent;
    }
    if (low < 0 || static_cast<uint64_t>(high + item) > buffer_bytes) {
        throw std::invalid_argument("view: bytes [" + std::to_string(low) + ", " +
                                    std::to_string(high + item) + ") lie outside the buffer of " +
                                    std::to_string(buffer_bytes) + " bytes");
    }
}

}  // namespace

Array::Array(BufferPtr buffer, Dims shape, Dims strides, int64_t offset, DType dtype)
    : buffer_(std::move(buffer)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype),
      size_(checked_size(shape_)) {}

int64_t Array::checked_size(const Dims& shape) {
    int64_t size = 1;
    for (int64_t extent : shape) {
        if (extent < 0) {
            throw std::invalid_argument("negative dimension " + std::to_string(extent) +
                                        " in shape");
        }
        // 2^62 bytes bounds every real allocation and keeps byte arithmetic far from overflow.
        if (extent != 0 && size > (int64_t{1} << 62) / extent) {
            throw std::invalid_argument("shape too large: more than 2^62 elements");
        }
        size *= extent;
    }
    return size;
}

Dims Array::contiguous_strides(const Dims& shape, int itemsize) {
    Dims strides(shape.size());
    int64_t stride = itemsize;
    for (size_t d = shape.size(); d-- > 0;) {
        strides[d] = stride;
        stride *= std::max<int64_t>(shape[d], 1);
    }
    return strides;
}

Array Array::empty(const Dims& shape, DType dtype, const StreamPtr& stream, bool evictable) {
    const int64_t size = checked_size(shape);
    const int item = pgk::itemsize(dtype);
    if (size > (int64_t{1} << 62) / item) {
        throw std::invalid_argument("array too large: more than 2^62 bytes");
    }
    BufferPtr buffer =
        Buffer::allocate(stream->device(), static_cast<uint64_t>(size) * item, stream, evictable);
    return Array(std::move(buffer), shape, contiguous_strides(shape, item), 0, dtype);
}

bool Array::is_c_contiguous() const {
    int64_t expected = itemsize();
    for (size_t d = shape_.size(); d-- > 0;) {
        if (shape_[d] == 0) return true;
        if (shape_[d] != 1 && strides_[d] != expected) return false;
        expected *= shape_[d];
    }
    return true;
}

Array Array::view(const Dims& shape, const Dims& strides, int64_t offset) const {
    checked_size(shape);
    check_layout(shape, strides, offset, itemsize(), buffer_->nbytes());
    return Array(buffer_, shape, strides, offset, dtype_);
}

Array Array::view_dtype(DType dtype) const {
    if (pgk::itemsize(dtype) != itemsize()) {
        throw std::invalid_argument(std::string("view_dtype: ") + dtype_name(dtype) +
                                    " has another itemsize than " + dtype_name(dtype_));
    }
    return Array(buffer_, shape_, strides_, offset_, dtype);
}

}  // namespace pgk
