// Inclusive prefix sums along one axis (built-in runtime kernel): cumsum_<dtype> over a
// C-contiguous [O, R, I] layout. Host side: native/ops/reduce.cpp.
//
// I == 1 (the scanned axis is the last): one block of 256 threads per row walks it in tiles of
// 256 * 8 elements: each thread scans its 8 in registers, a fixed shared-memory (Hillis-Steele)
// scan of the 256 thread totals gives each its offset, and the tile's total carries into the
// next tile. I > 1: one thread per column (o, i), a sequential loop over r; consecutive
// threads take consecutive columns, so every step is a coalesced row read. Both orders are
// fixed per shape: results are reproducible. Accumulators: float for float/half types, double
// for double, long long for integers; the output is the input type for floats, int64 otherwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T widen(T x) {
    return x;
}

template <typename O, typename A>
__device__ __forceinline__ O store(A x) {
    return static_cast<O>(x);
}
template <>
__device__ __forceinline__ __half store<__half, float>(float x) {
    return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16, float>(float x) {
    return __float2bfloat16_rn(x);
}

constexpr int kThreads = 256;
constexpr int kPerThread = 8;

template <typename T, typename A, typename O>
__device__ void cumsum_impl(const T* __restrict__ in, O* __restrict__ out, long long rows,
                            long long R, long long I) {
    if (I > 1) {
        const long long total = rows * I;
#pragma unroll 1
        for (long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x; c < total;
             c += (long long)gridDim.x * blockDim.x) {
            const long long o = c / I, i = c % I;
            const T* src = in + o * R * I + i;
            O* dst = out + o * R * I + i;
            A acc = 0;
            for (long long r = 0; r < R; ++r) {
                acc += static_cast<A>(widen(src[r * I]));
                dst[r * I] = store<O, A>(acc);
            }
        }
        return;
    }
    __shared__ A s_tot[kThreads];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* src = in + row * R;
        O* dst = out + row * R;
        A carry = 0;
        for (long long tile = 0; tile < R; tile += kThreads * kPerThread) {
            const long long first = tile + static_cast<long long>(threadIdx.x) * kPerThread;
            A v[kPerThread];
            A run = 0;
#pragma unroll
            for (int k = 0; k < kPerThread; ++k) {
                run += first + k < R ? static_cast<A>(widen(src[first + k])) : A(0);
                v[k] = run;
            }
            s_tot[threadIdx.x] = run;
            __syncthreads();
            for (int step = 1; step < kThreads; step *= 2) {
                const A add = threadIdx.x >= step ? s_tot[threadIdx.x - step] : A(0);
                __syncthreads();
                s_tot[threadIdx.x] += add;
                __syncthreads();
            }
            const A offset = carry + (threadIdx.x > 0 ? s_tot[threadIdx.x - 1] : A(0));
#pragma unroll
            for (int k = 0; k < kPerThread; ++k) {
                if (first + k < R) dst[first + k] = store<O, A>(offset + v[k]);
            }
            carry += s_tot[kThreads - 1];
            __syncthreads();
        }
    }
}

#define PGK_CUMSUM(sfx, T, A, O)                                                      \
    extern "C" __global__ void __launch_bounds__(kThreads)                            \
        cumsum_##sfx(const T* in, O* out, long long rows, long long R, long long I) { \
        cumsum_impl<T, A, O>(in, out, rows, R, I);                                    \
    }

PGK_CUMSUM(f64, double, double, double)
PGK_CUMSUM(f32, float, float, float)
PGK_CUMSUM(f16, __half, float, __half)
PGK_CUMSUM(bf16, __nv_bfloat16, float, __nv_bfloat16)
PGK_CUMSUM(i8, signed char, long long, long long)
PGK_CUMSUM(i16, short, long long, long long)
PGK_CUMSUM(i32, int, long long, long long)
PGK_CUMSUM(i64, long long, long long, long long)
PGK_CUMSUM(u8, unsigned char, long long, long long)
