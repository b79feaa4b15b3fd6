// out[i] = start + i * step (built-in runtime kernel). Floating dtypes take double start/step,
// integer dtypes long long ones, so large int64 ranges stay exact.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T, typename V>
__device__ void arange_impl(T* out, V start, V step, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        out[i] = T(start + static_cast<V>(i) * step);
    }
}

extern "C" {
__global__ void arange_f64(double* out, double start, double step, unsigned long long n) {
    arange_impl(out, start, step, n);
}
__global__ void arange_f32(float* out, double start, double step, unsigned long long n) {
    arange_impl(out, start, step, n);
}
__global__ void arange_f16(__half* out, double start, double step, unsigned long long n) {
    arange_impl(out, start, step, n);
}
__global__ void arange_bf16(__nv_bfloat16* out, double start, double step, unsigned long long n) {
    arange_impl(out, start, step, n);
}
__global__ void arange_i8(signed char* out, long long start, long long step, unsigned long long n) {
    arange_impl(out, start, step, n);
}
__global__ void arange_i16(short* out, long long start, long long step, unsigned long long n) {
    arange_impl(out, start, step, n);
}
__global__ void arange_i32(int* out, long long start, long long step, unsigned long long n) {
    arange_impl(out, start, step, n);
}
__global__ void arange_i64(long long* out, long long start, long long step, unsigned long long n) {
    arange_impl(out, start, step, n);
}
__global__ void arange_u8(unsigned char* out, long long start, long long step,
                          unsigned long long n) {
    arange_impl(out, start, step, n);
}
}
