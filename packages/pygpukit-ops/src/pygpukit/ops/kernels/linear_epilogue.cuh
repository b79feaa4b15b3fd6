// Shared by the linear kernels (gemv.cu, decode_linear.cu, epilogue.cu): the activations a
// linear layer can fuse into its epilogue (codes match pygpukit/ops/linear.py ACTIVATIONS), and
// the weight stream's 16-byte loads and their unpacking to fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "layers.cuh"

namespace pygpukit_linear {

enum Activation : int { kNone = 0, kRelu = 1, kGelu = 2, kGeluTanh = 3, kSilu = 4 };

__device__ __forceinline__ float activate(float v, int act) {
    switch (act) {
        case kRelu:
            return fmaxf(v, 0.0f);
        case kGelu:  // exact GELU: x * Phi(x)
            return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        case kGeluTanh: {  // tanh approximation (PyTorch approximate="tanh")
            const float inner = 0.79788456080286536f * (v + 0.044715f * v * v * v);
            return 0.5f * v * (1.0f + tanhf(inner));
        }
        case kSilu:
            return v / (1.0f + expf(-v));
        default:
            return v;
    }
}

// fp32 <-> storage conversions: the row kernels' (layers.cuh).
using pgk_layers::narrow;
using pgk_layers::widen;

// One 16-byte chunk of a weight row, read once: through the read-only path, not allocated in L1
// (which keeps x). The compiler may move it to where the value is used.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// The same load, issued exactly where it is written: a kernel launched with programmatic
// dependent launch issues its first weight loads before it waits for the previous kernel, and a
// movable load could sink past that wait.
__device__ __forceinline__ uint4 load_stream_now(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Two packed 16-bit values -> two floats.
template <typename T>
__device__ __forceinline__ float2 unpack2(unsigned u);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(unsigned u) {
    // bf16 is the high half of an fp32: shifting is the exact conversion.
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(unsigned u) {
    __half2 h = *reinterpret_cast<__half2*>(&u);
    return __half22float2(h);
}

// Eight packed 16-bit values (one chunk) -> eight floats, in memory order.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
    float2 a = unpack2<T>(v.x), b = unpack2<T>(v.y), c = unpack2<T>(v.z), d = unpack2<T>(v.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

}  // namespace pygpukit_linear
