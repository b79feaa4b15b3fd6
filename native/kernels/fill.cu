// Fill a contiguous buffer with one value (built-in runtime kernel). The host sends the value's
// bit pattern, so one entry point per element size serves every dtype. fill_x16 writes 16-byte
// vectors (the value replicated) for the aligned bulk of a buffer; fill_uN covers the rest.
template <typename T>
__device__ void fill_impl(T* out, T value, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        out[i] = value;
    }
}

extern "C" {
__global__ void fill_u8(unsigned char* out, unsigned char v, unsigned long long n) {
    fill_impl(out, v, n);
}
__global__ void fill_u16(unsigned short* out, unsigned short v, unsigned long long n) {
    fill_impl(out, v, n);
}
__global__ void fill_u32(unsigned int* out, unsigned int v, unsigned long long n) {
    fill_impl(out, v, n);
}
__global__ void fill_u64(unsigned long long* out, unsigned long long v, unsigned long long n) {
    fill_impl(out, v, n);
}
__global__ void fill_x16(uint4* out, uint4 v, unsigned long long n) { fill_impl(out, v, n); }
}
