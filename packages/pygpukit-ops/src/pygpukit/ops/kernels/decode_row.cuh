// The per-row arithmetic of the one-token decode GEMV (decode_linear.cu), as device functions a
// batched kernel can run for each of its rows (decode_linear_batched.cu): the same 16-byte chunk
// to lane assignment, the same fmaf order, the same butterfly and the same rounding points, so a
// row computed in a batch is bitwise the row decode_linear computes alone.
//
// decode_linear.cu still has its own copies of these helpers (its owner keeps its file); it can
// include this header instead, unchanged in value.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "linear_epilogue.cuh"

namespace pgk_decode_row {

using pygpukit_linear::narrow;
using pygpukit_linear::widen;

// Threads of a block that RMS-normalises one row: decode_linear's block (4 warps). The sum of
// squares is split over exactly these threads, so its rounding is decode_linear's.
constexpr int kNormWarps = 4;

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

template <typename T>
__device__ __forceinline__ float2 unpack2(unsigned u);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(unsigned u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(unsigned u) {
    __half2 h = *reinterpret_cast<__half2*>(&u);
    return __half22float2(h);
}

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
    float2 a = unpack2<T>(v.x), b = unpack2<T>(v.y), c = unpack2<T>(v.z), d = unpack2<T>(v.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

__device__ __forceinline__ float table_at(const void* __restrict__ t, long long i, int kind) {
    if (kind == 1) return __half2float(static_cast<const __half*>(t)[i]);
    if (kind == 2) return __bfloat162float(static_cast<const __nv_bfloat16*>(t)[i]);
    return static_cast<const float*>(t)[i];
}

// Eight elements of x normalised by inv and scaled by the norm weight, rounded to T.
template <typename T>
__device__ __forceinline__ uint4 normalized(const uint4& xc, const uint4& wc, float inv) {
    float f[8], g[8];
    unpack8<T>(xc, f);
    unpack8<T>(wc, g);
    T r[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) r[e] = narrow<T>(f[e] * inv * g[e]);
    return *reinterpret_cast<uint4*>(r);
}

// The rounded output of the unfused GEMV, widened again.
template <typename T>
__device__ __forceinline__ float rounded(float v) {
    return widen(narrow<T>(v));
}

// RMSNorm of the row x [K] into out (rounded to T): out = x * rsqrt(mean(x^2) + eps) * w, by a
// block of kNormWarps warps: thread i sums chunks i, i + 128, ... (its first kHeld chunks held in
// registers), then a warp butterfly, then the four warp sums in order.
template <typename T>
__device__ __forceinline__ void norm_row(const T* __restrict__ x, const T* __restrict__ w,
                                         float eps, T* out_row, int K) {
    constexpr int kHeld = 4;
    __shared__ float warp_sums[kNormWarps];
    const int chunks = K >> 3;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    uint4* out = reinterpret_cast<uint4*>(out_row);
    uint4 xh[kHeld], wh[kHeld];
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < chunks) xh[i] = xv[c], wh[i] = wv[c];
    }
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
        if (threadIdx.x + i * blockDim.x < chunks) {
            float f[8];
            unpack8<T>(xh[i], f);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc += f[e] * f[e];
        }
    }
    for (int c = threadIdx.x + kHeld * blockDim.x; c < chunks; c += blockDim.x) {
        float f[8];
        unpack8<T>(xv[c], f);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc += f[e] * f[e];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kNormWarps; ++i) total += warp_sums[i];
    const float inv = rsqrtf(total * (1.0f / static_cast<float>(K)) + eps);  // as the norm kernel
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < chunks) out[c] = normalized<T>(xh[i], wh[i], inv);
    }
    for (int c = threadIdx.x + kHeld * blockDim.x; c < chunks; c += blockDim.x)
        out[c] = normalized<T>(xv[c], wv[c], inv);
    __syncthreads();
}

// The warp's sum of one value per lane (xor butterfly 16, 8, 4, 2, 1: every lane gets it).
__device__ __forceinline__ float butterfly_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

}  // namespace pgk_decode_row
