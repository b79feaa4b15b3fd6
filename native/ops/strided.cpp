#include "ops/strided.hpp"

#include <stdexcept>
#include <string>

#include "core/launch.hpp"
#include "jit/builtin.hpp"

namespace pgk {

namespace {

StridedLayout coalesce(const Dims& shape, const Dims& dst_strides, const Dims& src_strides) {
    StridedLayout l{};
    long long shp[64], dst[64], src[64];
    int n = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] == 1) continue;
        if (n > 0 && dst[n - 1] == shape[d] * dst_strides[d] &&
            src[n - 1] == shape[d] * src_strides[d]) {
            // The previous (outer) dimension steps exactly over this one on both sides: merge.
            shp[n - 1] *= shape[d];
            dst[n - 1] = dst_strides[d];
            src[n - 1] = src_strides[d];
            continue;
        }
        if (n == 64) throw std::invalid_argument("strided copy: more than 64 dimensions");
        shp[n] = shape[d];
        dst[n] = dst_strides[d];
        src[n] = src_strides[d];
        ++n;
    }
    if (n > kMaxStridedDims) {
        throw std::invalid_argument("strided copy: the layout needs " + std::to_string(n) +
                                    " dimensions after merging; at most 8 are supported (make "
                                    "the array contiguous first)");
    }
    l.ndim = n;
    for (int d = 0; d < n; ++d) {
        l.shape[d] = shp[d];
        l.dst_strides[d] = dst[d];
        l.src_strides[d] = src[d];
    }
    return l;
}

const BuiltinKernel& kernel_for(int itemsize) {
    static const BuiltinKernel k1("copy", "strided_copy_1"), k2("copy", "strided_copy_2"),
        k4("copy", "strided_copy_4"), k8("copy", "strided_copy_8");
    switch (itemsize) {
        case 1:
            return k1;
        case 2:
            return k2;
        case 4:
            return k4;
        case 8:
            return k8;
    }
    throw std::invalid_argument("strided copy: unsupported itemsize " + std::to_string(itemsize));
}

// Copies the innermost dimension in wider units where it is contiguous on both sides and every
// address and stride allows it: `wide` bytes per thread instead of `itemsize` (the kernels for
// 1, 2, 4 and 8 bytes), so fewer index computations and wider loads. The attention output's
// [B, H, S, D] -> [B, S, H, D] transpose of bfloat16 rows of 128 moves 8 bytes a thread instead
// of 2. Returns the element size to copy with; `l` and `n` are rewritten in those units.
int widen(StridedLayout& l, uint64_t dst, uint64_t src, int itemsize, unsigned long long& n) {
    if (l.ndim == 0) return itemsize;
    const int last = l.ndim - 1;
    if (l.dst_strides[last] != itemsize || l.src_strides[last] != itemsize) return itemsize;
    const long long bytes = l.shape[last] * itemsize;
    for (int wide = 8; wide > itemsize; wide /= 2) {
        bool ok = bytes % wide == 0 && dst % wide == 0 && src % wide == 0;
        for (int d = 0; ok && d < last; ++d) {
            ok = l.dst_strides[d] % wide == 0 && l.src_strides[d] % wide == 0;
        }
        if (!ok) continue;
        l.shape[last] = bytes / wide;
        l.dst_strides[last] = wide;
        l.src_strides[last] = wide;
        n = n / static_cast<unsigned long long>(bytes / itemsize) *
            static_cast<unsigned long long>(bytes / wide);
        return wide;
    }
    return itemsize;
}

}  // namespace

void strided_copy(uint64_t dst, const Dims& dst_strides, uint64_t src, const Dims& src_strides,
                  const Dims& shape, int itemsize, const Stream& stream) {
    unsigned long long n = static_cast<unsigned long long>(Array::checked_size(shape));
    if (n == 0) return;
    StridedLayout layout = coalesce(shape, dst_strides, src_strides);
    const int unit = widen(layout, dst, src, itemsize, n);
    CUfunction f = kernel_for(unit).get(stream.device());
    void* args[] = {&dst, &src, &layout, &n};
    launch_kernel(f, launch_config_1d(n, stream.device()), stream, args);
}

}  // namespace pgk
