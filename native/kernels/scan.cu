// Inclusive prefix sums along one axis (built-in runtime kernel): cumsum_<dtype> over a
// C-contiguous [O, R, I] layout. Host side: native/ops/reduce.cpp.
//
// I == 1 (the scanned axis is the last): one block of 256 threads per row walks it in tiles of
// 256 * 8 elements: each thread scans its 8 in registers, a fixed shared-memory (Hillis-Steele)
// scan of the 256 thread totals gives each its offset, and the tile's total carries into the
// next tile. I > 1: one thread per column (o, i), a sequential loop over r; consecutive
// threads take consecutive columns, so every step is a coalesced row read. Both orders are
// fixed per shape: results are reproducible. Long rows that would leave SMs idle are cut into
// segments scanned by separate blocks (writing each segment's total), the totals scanned by this
// kernel again, and cumsum_add_<out> adds each segment's offset. Accumulators: float for float/half
// types, double for double, long long for integers; the output is the input type for floats, int64
// otherwise.
#include "dtype_convert.cuh"  // widen: half types to float

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
                            long long R, long long I, long long seg_len, A* __restrict__ totals) {
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
    // Blocks walk segments of seg_len elements (a whole row unless the host split long rows).
    const long long segs = (R + seg_len - 1) / seg_len;
    for (long long seg = blockIdx.x; seg < rows * segs; seg += gridDim.x) {
        const long long row = seg / segs;
        const long long seg_begin = (seg % segs) * seg_len;
        const long long seg_end = seg_begin + seg_len < R ? seg_begin + seg_len : R;
        const T* src = in + row * R;
        O* dst = out + row * R;
        A carry = 0;
        for (long long tile = seg_begin; tile < seg_end; tile += kThreads * kPerThread) {
            const long long first = tile + static_cast<long long>(threadIdx.x) * kPerThread;
            A v[kPerThread];
            A run = 0;
#pragma unroll
            for (int k = 0; k < kPerThread; ++k) {
                run += first + k < seg_end ? static_cast<A>(widen(src[first + k])) : A(0);
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
                if (first + k < seg_end) dst[first + k] = store<O, A>(offset + v[k]);
            }
            carry += s_tot[kThreads - 1];
            __syncthreads();
        }
        if (totals != nullptr && threadIdx.x == 0) totals[seg] = carry;
    }
}

// Pass 3 of a split row: segment s > 0 of each row gets the inclusive scan of the segment
// totals up to s - 1 (offsets: [rows, segs]).
template <typename O, typename A>
__device__ void cumsum_add_impl(O* __restrict__ out, const A* __restrict__ offsets, long long rows,
                                long long R, long long seg_len) {
    const long long segs = (R + seg_len - 1) / seg_len;
    const long long total = rows * R;
#pragma unroll 1
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long row = e / R, s = (e % R) / seg_len;
        if (s > 0)
            out[e] = store<O, A>(static_cast<A>(widen(out[e])) + offsets[row * segs + s - 1]);
    }
}

#define PGK_CUMSUM(sfx, T, A, O)                                                    \
    extern "C" __global__ void __launch_bounds__(kThreads)                          \
        cumsum_##sfx(const T* in, O* out, long long rows, long long R, long long I, \
                     long long seg_len, A* totals) {                                \
        cumsum_impl<T, A, O>(in, out, rows, R, I, seg_len, totals);                 \
    }

#define PGK_CUMSUM_ADD(sfx, O, A)                                                         \
    extern "C" __global__ void cumsum_add_##sfx(O* out, const A* offsets, long long rows, \
                                                long long R, long long seg_len) {         \
        cumsum_add_impl<O, A>(out, offsets, rows, R, seg_len);                            \
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

PGK_CUMSUM_ADD(f64, double, double)
PGK_CUMSUM_ADD(f32, float, float)
PGK_CUMSUM_ADD(f16, __half, float)
PGK_CUMSUM_ADD(bf16, __nv_bfloat16, float)
PGK_CUMSUM_ADD(i64, long long, long long)
