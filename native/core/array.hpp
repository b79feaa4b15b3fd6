// Array: an N-d view (shape, byte strides, byte offset, dtype) of a device Buffer. Views share
// the buffer; the buffer goes back to the pool when the last view goes.
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.hpp"
#include "core/dtype.hpp"
#include "core/stream.hpp"

namespace pgk {

using Dims = std::vector<int64_t>;

class Array {
  public:
    Array(BufferPtr buffer, Dims shape, Dims strides, int64_t offset, DType dtype);

    // Uninitialized C-contiguous array; every byte from the Rust pool, usable on `stream`.
    // Evictable arrays may be spilled to host memory under pressure (core/residency.hpp).
    static Array empty(const Dims& shape, DType dtype, const StreamPtr& stream,
                       bool evictable = false);
    static Dims contiguous_strides(const Dims& shape, int itemsize);
    // Throws std::invalid_argument for a negative extent; returns the element count.
    static int64_t checked_size(const Dims& shape);

    const Dims& shape() const { return shape_; }
    const Dims& strides() const { return strides_; }
    int64_t offset() const { return offset_; }
    DType dtype() const { return dtype_; }
    int itemsize() const { return pgk::itemsize(dtype_); }
    int64_t size() const { return size_; }
    int64_t nbytes() const { return size_ * itemsize(); }
    int ndim() const { return static_cast<int>(shape_.size()); }
    int device() const { return buffer_->device(); }
    // For an evictable buffer, valid only after make_resident on the stream of the work using it
    // and before the next pool call (checked: std::logic_error otherwise).
    uint64_t data_ptr() const {
        if (buffer_->evictable()) buffer_->check_resident();
        return buffer_->ptr() + offset_;
    }
    bool is_c_contiguous() const;
    const BufferPtr& buffer() const { return buffer_; }

    // Same buffer, other layout; throws std::invalid_argument when the view leaves the buffer or
    // is misaligned for the dtype.
    Array view(const Dims& shape, const Dims& strides, int64_t offset) const;
    // Same bytes read as another dtype of the same itemsize.
    Array view_dtype(DType dtype) const;

  private:
    BufferPtr buffer_;
    Dims shape_;
    Dims strides_;
    int64_t offset_;
    DType dtype_;
    int64_t size_;
};

}  // namespace pgk
