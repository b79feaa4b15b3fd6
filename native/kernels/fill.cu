// Fill a contiguous buffer with one value (built-in runtime kernel).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T>
__device__ void fill_impl(T* out, T value, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        out[i] = value;
    }
}

extern "C" {
__global__ void fill_u8(unsigned char* out, unsigned char v, unsigned long long n) { fill_impl(out, v, n); }
__global__ void fill_u16(unsigned short* out, unsigned short v, unsigned long long n) { fill_impl(out, v, n); }
__global__ void fill_u32(unsigned int* out, unsigned int v, unsigned long long n) { fill_impl(out, v, n); }
__global__ void fill_u64(unsigned long long* out, unsigned long long v, unsigned long long n) { fill_impl(out, v, n); }
}
