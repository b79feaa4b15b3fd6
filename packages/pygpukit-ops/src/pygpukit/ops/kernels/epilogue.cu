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

extern "C" __global__ void bias_act_f32(float* y, const float* bias, long long rows, int cols,
                                        int act) {
    bias_act<float>(y, bias, rows, cols, act);
}
extern "C" __global__ void bias_act_f16(__half* y, const __half* bias, long long rows, int cols,
                                        int act) {
    bias_act<__half>(y, bias, rows, cols, act);
}
extern "C" __global__ void bias_act_bf16(__nv_bfloat16* y, const __nv_bfloat16* bias,
                                         long long rows, int cols, int act) {
    bias_act<__nv_bfloat16>(y, bias, rows, cols, act);
}
