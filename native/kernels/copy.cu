// Strided copy (built-in runtime kernel): dst[i] = src[i] over an N-d index space (N <= 8) with
// independent byte strides on both sides. Serves non-contiguous device copies, making arrays
// contiguous, broadcasts (a zero source stride) and strided fills (a one-element source with all
// strides zero). One entry point per element size: the bytes are moved, not interpreted.

// Must match StridedLayout in native/ops/strided.hpp.
struct StridedLayout {
    int ndim;
    long long shape[8];
    long long dst_strides[8];
    long long src_strides[8];
};

template <typename T>
__device__ void strided_copy_impl(char* dst, const char* src, const StridedLayout& l,
                                  unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long rem = i;
        long long dst_off = 0, src_off = 0;
#pragma unroll
        for (int d = 7; d >= 0; --d) {
            if (d < l.ndim) {
                const unsigned long long extent = (unsigned long long)l.shape[d];
                const long long idx = (long long)(rem % extent);
                rem /= extent;
                dst_off += idx * l.dst_strides[d];
                src_off += idx * l.src_strides[d];
            }
        }
        *reinterpret_cast<T*>(dst + dst_off) = *reinterpret_cast<const T*>(src + src_off);
    }
}

extern "C" {
__global__ void strided_copy_1(char* dst, const char* src, StridedLayout l, unsigned long long n) {
    strided_copy_impl<unsigned char>(dst, src, l, n);
}
__global__ void strided_copy_2(char* dst, const char* src, StridedLayout l, unsigned long long n) {
    strided_copy_impl<unsigned short>(dst, src, l, n);
}
__global__ void strided_copy_4(char* dst, const char* src, StridedLayout l, unsigned long long n) {
    strided_copy_impl<unsigned int>(dst, src, l, n);
}
__global__ void strided_copy_8(char* dst, const char* src, StridedLayout l, unsigned long long n) {
    strided_copy_impl<unsigned long long>(dst, src, l, n);
}
}
