// Shared by gemv.cu and epilogue.cu: the activations a linear layer can fuse into its epilogue,
// and fp32 <-> storage conversions. Codes match pygpukit/ops/linear.py ACTIVATIONS.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
    return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

}  // namespace pygpukit_linear
