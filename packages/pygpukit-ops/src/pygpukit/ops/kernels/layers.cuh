// Shared pieces of the row-wise layer kernels (normalization.cu, activations.cu, rope.cu):
// dtype conversions (also used by the linear, attention and sampling kernels), packed vector
// loads/stores, the row-group reductions, and the rotation of one RoPE pair.
//
// Row kernels give each row a *group* of `group` consecutive threads: a power of two up to 32
// (several rows per warp/block, reduced with warp shuffles alone), or the whole block (a multiple
// of 32, one row per block, reduced with shuffles and a 32-float shared-memory slot).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "pygpukit/kernel.cuh"

namespace pgk_layers {

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T narrow(float x);
template <>
__device__ __forceinline__ float narrow<float>(float x) {
    return x;
}
template <>
__device__ __forceinline__ __half narrow<__half>(float x) {
    return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// VEC elements of T loaded or stored as one access (16 bytes for the vector kernels; the host
// picks VEC = 1 when a row or a pointer is not 16-byte aligned).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void load_f32(const T* __restrict__ p, float (&out)[VEC]) {
    const Pack<T, VEC> a = *reinterpret_cast<const Pack<T, VEC>*>(p);
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = widen(a.v[k]);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_f32(T* __restrict__ p, const float (&in)[VEC]) {
    Pack<T, VEC> a;
#pragma unroll
    for (int k = 0; k < VEC; ++k) a.v[k] = narrow<T>(in[k]);
    *reinterpret_cast<Pack<T, VEC>*>(p) = a;
}

// Streaming accesses of the row data, read once and written once: loads that do not allocate
// in L1 (keeping it for the weights every row reads) and evict-first stores.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_stream(const T* __restrict__ p) {
    if constexpr (sizeof(Pack<T, VEC>) == 16) {
        uint4 r;
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
            : "l"(p));
        return *reinterpret_cast<Pack<T, VEC>*>(&r);
    }
    return *reinterpret_cast<const Pack<T, VEC>*>(p);
}

template <typename T, int VEC>
__device__ __forceinline__ void store_stream(T* __restrict__ p, const Pack<T, VEC>& a) {
    if constexpr (sizeof(Pack<T, VEC>) == 16) {
        const uint4 r = *reinterpret_cast<const uint4*>(&a);
        asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(r.x), "r"(r.y),
                     "r"(r.z), "r"(r.w)
                     : "memory");
        return;
    }
    *reinterpret_cast<Pack<T, VEC>*>(p) = a;
}

template <typename T, int VEC>
__device__ __forceinline__ void store_stream_f32(T* __restrict__ p, const float (&in)[VEC]) {
    Pack<T, VEC> a;
#pragma unroll
    for (int k = 0; k < VEC; ++k) a.v[k] = narrow<T>(in[k]);
    store_stream<T, VEC>(p, a);
}

struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
    static __device__ __forceinline__ float identity() { return 0.0f; }
};
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
    static __device__ __forceinline__ float identity() { return -__int_as_float(0x7f800000); }
};

// Reduce `v` over the thread's row group (see the top of the file). Every thread of the block
// must call it (the shuffles use the full warp mask); every thread gets the group's result.
// `slot` is 32 floats of shared memory that no other reduction of the same kernel uses, so
// consecutive reductions need no barrier between them.
template <typename Op>
__device__ __forceinline__ float group_reduce(float v, int group, float* slot) {
    const Op op;
    const int width = group < 32 ? group : 32;
    for (int o = width >> 1; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (group <= 32) return v;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) slot[warp] = v;
    __syncthreads();
    float t = lane < static_cast<int>(blockDim.x >> 5) ? slot[lane] : Op::identity();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t = op(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

// RoPE of one pair (x0, x1) by angle (c, s): (x0 c - x1 s, x1 c + x0 s), with its roundings
// written out (one fmaf each, the other product rounded first). Left as plain expressions, the
// compiler picks which product to fuse per kernel, and two kernels of the same source could
// round a pair differently; every RoPE kernel (rope.cu, the decode GEMV epilogues) rotates
// through this one, so their results agree bit for bit.
__device__ __forceinline__ float2 rope_pair(float x0, float x1, float c, float s) {
    return make_float2(fmaf(x0, c, -__fmul_rn(x1, s)), fmaf(x0, s, __fmul_rn(x1, c)));
}

}  // namespace pgk_layers

// The (dtype, vector width) pairs of the row kernels: 16-byte packs, or one element when a row
// or a pointer is not 16-byte aligned. X(suffix, type, VEC).
// clang-format off
#define PGK_ROW_TYPES(X)                                                                \
    X(f32, float, 4) X(f32, float, 1) X(f16, __half, 8) X(f16, __half, 1)               \
    X(bf16, __nv_bfloat16, 8) X(bf16, __nv_bfloat16, 1)
// clang-format on

// The four entry points of a row-kernel family for one dtype and VEC: <family>_<sfx>_v<VEC>_n<NV>
// (the row in registers, NV packs per thread: `rows<T, VEC, NV>`) and <family>_<sfx>_v<VEC>_s
// (rows too wide for registers: `streaming<T, VEC>`). `params` and `args` are the parameter
// list and the call's argument list, both in parentheses.
#define PGK_ROW_KERNELS(family, sfx, T, VEC, params, args, rows, streaming)                 \
    PGK_KERNEL_BOUNDS(family##_##sfx##_v##VEC##_n1, params, 1024) { rows<T, VEC, 1> args; } \
    PGK_KERNEL_BOUNDS(family##_##sfx##_v##VEC##_n2, params, 1024) { rows<T, VEC, 2> args; } \
    PGK_KERNEL_BOUNDS(family##_##sfx##_v##VEC##_n4, params, 512) { rows<T, VEC, 4> args; }  \
    PGK_KERNEL_BOUNDS(family##_##sfx##_v##VEC##_s, params, 1024) { streaming<T, VEC> args; }
