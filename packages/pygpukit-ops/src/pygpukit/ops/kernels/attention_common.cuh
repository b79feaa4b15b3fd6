// Helpers shared by the attention kernels: 16-bit element traits, cp.async, ldmatrix, mma.sync.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "layers.cuh"

namespace pgk_attn {

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

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src-size 0 zero-fills the destination (rows past the end).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// D (16x8 fp32) += A (16x16) * B (16x8), A row-major, B column-major fragments.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                                 unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4],
                                                        unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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
