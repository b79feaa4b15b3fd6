// Shared by gemv.cu and epilogue.cu: the activations a linear layer can fuse into its epilogue.
// Codes match pygpukit/ops/linear.py ACTIVATIONS.
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

}  // namespace pygpukit_linear
