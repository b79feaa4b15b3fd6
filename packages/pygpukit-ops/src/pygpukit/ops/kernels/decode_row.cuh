// The per-row arithmetic of the decode GEMVs, one definition for the one-token kernel
// (decode_linear.cu) and its batched twin (decode_linear_batched.cu): the RMSNorm prologue, the
// table reads and rounding points of the epilogues, the butterfly. Both kernels run these same
// functions, so a row computed in a batch is bitwise the row decode_linear computes alone. The
// weight loads and unpacking come from linear_epilogue.cuh, the RoPE rotation from layers.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "linear_epilogue.cuh"

namespace pgk_decode_row {

// The weight stream's loads and unpacking (shared with decode_linear.cu and gemv.cu).
using pygpukit_linear::load_stream;
using pygpukit_linear::narrow;
using pygpukit_linear::unpack2;
using pygpukit_linear::unpack8;
using pygpukit_linear::widen;
// The rotation of one RoPE pair (shared with rope.cu).
using pgk_layers::rope_pair;

// Warps of a block that RMS-normalises one row: decode_linear's block. The sum of squares is
// split over exactly these threads, so its rounding is the same in every kernel.
constexpr int kNormWarps = 4;

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

// The warp's sum of one value per lane (xor butterfly 16, 8, 4, 2, 1: every lane gets it).
__device__ __forceinline__ float butterfly_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// RMSNorm of the row x [K] into out (rounded to T, as the norm kernel stores it): out = x *
// rsqrt(mean(x^2) + eps) * w, by a block of kNormWarps warps: thread i sums chunks i, i + 128,
// ... then a warp butterfly, then the four warp sums in order. A thread loads its first kHeld
// chunks of x and w together and keeps them in registers, so the prologue costs one round trip to
// L2 (K up to kHeld * 8 * 128 = 4096); chunks past those are read again for the second pass.
// kMayBeNull: x null is a row of zeros (decode_linear's gathered id outside the table); off, the
// loads carry no test. Ends with a barrier: out may be shared memory the block reads next.
template <typename T, bool kMayBeNull = false>
__device__ __forceinline__ void norm_row(const T* __restrict__ x, const T* __restrict__ w,
                                         float eps, T* out_row, int K) {
    constexpr int kHeld = 4;
    __shared__ float warp_sums[kNormWarps];
    const int chunks = K >> 3;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    uint4* out = reinterpret_cast<uint4*>(out_row);
    auto x_at = [&](int c) {
        if constexpr (kMayBeNull) return xv != nullptr ? xv[c] : make_uint4(0, 0, 0, 0);
        return xv[c];
    };
    uint4 xh[kHeld], wh[kHeld];
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < chunks) xh[i] = x_at(c), wh[i] = wv[c];
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
        unpack8<T>(x_at(c), f);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc += f[e] * f[e];
    }
    acc = butterfly_sum(acc);
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
        out[c] = normalized<T>(x_at(c), wv[c], inv);
    __syncthreads();
}

}  // namespace pgk_decode_row
