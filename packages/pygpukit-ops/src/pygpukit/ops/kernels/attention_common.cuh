// Helpers shared by the attention kernels: 16-bit element traits, exp2 and -inf, the prefill
// tile order (cp.async, ldmatrix and mma.sync come from pygpukit/mma.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "layers.cuh"
#include "pygpukit/mma.cuh"

namespace pgk_attn {

// cp.async, ldmatrix and mma.sync from the runtime's shared header.
using namespace pgk;

template <typename T>
struct Half2;
template <>
struct Half2<__half> {
    using type = __half2;
    static __device__ __forceinline__ unsigned pack(float a, float b) {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<unsigned*>(&h);
    }
    static __device__ __forceinline__ float2 unpack(unsigned u) {
        return __half22float2(*reinterpret_cast<__half2*>(&u));
    }
};
template <>
struct Half2<__nv_bfloat16> {
    using type = __nv_bfloat162;
    static __device__ __forceinline__ unsigned pack(float a, float b) {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<unsigned*>(&h);
    }
    static __device__ __forceinline__ float2 unpack(unsigned u) {
        return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
    }
};

// fp16/bf16 -> fp32 (a mask element): the row kernels' conversion (layers.cuh).
using pgk_layers::widen;

// The running row maximum of the online softmax: NaN-propagating (max.NaN, one instruction on
// SM 80+), unlike fmaxf, so a NaN score makes the row's output NaN as PyTorch's SDPA does
// instead of being skipped by the maximum and then zeroed as "no key seen".
__device__ __forceinline__ float max_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

constexpr float kLog2e = 1.4426950408889634f;
#define PGK_NEG_INF __int_as_float(0xff800000)

// The prefill kernels' CTA order. A 1-d grid of B * Hq * row tiles, taken in groups of
// kHeadGroup heads: within a group the longest causal row tiles of all its heads come first
// (row tile index from the last down, heads varying fastest), so the CTAs that start last are
// short ones and no long tile runs alone at the end (the longest-first rule); the group's K/V
// (2 MB per head at S = 4096, D = 128) stays in L2 while its CTAs reread it. One group of all
// heads loses that reuse, and heads one after another (all row tiles of a head, then the next)
// leave the last head's longest tile to run alone at the end (docs/ops-attention.md).
constexpr int kHeadGroup = 8;

struct PrefillOrder {
    int m0, h, b;  // first query row, head, batch of this CTA
    __device__ __forceinline__ PrefillOrder(int sq, int rows, int hq) {
        const int tiles = (sq + rows - 1) / rows;
        const int bh_count = gridDim.x / tiles;
        const int group = blockIdx.x / (kHeadGroup * tiles);
        const int first = group * kHeadGroup;
        const int heads = min(kHeadGroup, bh_count - first);
        const int r = blockIdx.x - group * kHeadGroup * tiles;
        const int bh = first + r % heads;
        m0 = (tiles - 1 - r / heads) * rows;
        h = bh % hq;
        b = bh / hq;
    }
};

}  // namespace pgk_attn

// The head dims every attention family is instantiated for (attention.py HEAD_DIMS), as
// X(suffix, type, D) for one dtype.
#define PGK_ATTN_HEAD_DIMS(X, sfx, T) \
    X(sfx, T, 64) X(sfx, T, 80) X(sfx, T, 96) X(sfx, T, 128) X(sfx, T, 256)
