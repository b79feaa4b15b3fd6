// Bias + activation applied in place to a matmul result y [rows, cols] (the M > 8 path of
// pygpukit.ops.linear): one read and one write of y, fp32 math, one rounding to the storage type.
#include "linear_epilogue.cuh"
#include "pygpukit/kernel.cuh"

using namespace pygpukit_linear;

template <typename T>
__device__ __forceinline__ void bias_act(T* y, const T* bias, long long rows, int cols, int act) {
    const long long total = rows * (long long)cols;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float v = widen(y[i]);
        if (bias != nullptr) v += widen(bias[i % cols]);
        y[i] = narrow<T>(activate(v, act));
    }
}

#define PGK_BIAS_ACT(sfx, T)                                                                \
    PGK_KERNEL(bias_act_##sfx, (T * y, const T* bias, long long rows, int cols, int act)) { \
        bias_act<T>(y, bias, rows, cols, act);                                              \
    }
PGK_FLOAT_TYPES(PGK_BIAS_ACT)
