// Norms and activations over [B, C, L] signals (host side: ops/channels.py):
//
//   instance_norm_<dtype>  one block per (b, c) row of L samples: mean, then the variance of the
//                          centred values (two passes, no cancellation), then
//                          n = (x - mean) * rsqrt(var + eps) * w[c] + bias[c] and
//                          y = act(n * (1 + gamma[b, c]) + beta[b, c]), every factor optional
//                          (AdaIN when gamma/beta are given; act: none, LeakyReLU or Snake);
//   channel_norm_<dtype>   LayerNorm over C at each (b, l): one thread per position, consecutive
//                          threads on consecutive l so each channel's loads are coalesced;
//   snake_<dtype>          y = x + sin(alpha[c] * x)^2 / alpha[c];
//   leaky_relu_<dtype>     y = x >= 0 ? x : slope * x, any shape.
//
// fp32 math for every storage type, rounded once. The elementwise kernels are grid-stride loops
// with 64-bit indices; every kernel may run in place (y == x).
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

constexpr int kActNone = 0;
constexpr int kActLeaky = 1;
constexpr int kActSnake = 2;

__device__ __forceinline__ float activate(float v, int act, float slope, float alpha) {
    if (act == kActLeaky) return v >= 0.0f ? v : slope * v;
    if (act == kActSnake) {
        const float s = sinf(alpha * v);
        return v + s * s / alpha;
    }
    return v;
}

template <typename T>
__device__ __forceinline__ void instance_norm(const T* x, T* y, const T* __restrict__ weight,
                                              const T* __restrict__ bias,
                                              const T* __restrict__ gamma,
                                              const T* __restrict__ beta, long long gamma_stride,
                                              long long beta_stride, const T* __restrict__ alpha,
                                              int channels, int length, float eps, int act,
                                              float slope) {
    __shared__ float slots[64];
    const long long row = blockIdx.x;  // b * channels + c
    const int ch = static_cast<int>(row % channels);
    const long long b = row / channels;
    const T* src = x + row * length;
    T* dst = y + row * length;
    float acc = 0.0f;
    for (int l = threadIdx.x; l < length; l += blockDim.x) acc += widen(src[l]);
    const float inv_length = 1.0f / static_cast<float>(length);
    const float mean = group_reduce<SumOp>(acc, blockDim.x, slots) * inv_length;
    float sq = 0.0f;
    for (int l = threadIdx.x; l < length; l += blockDim.x) {
        const float d = widen(src[l]) - mean;
        sq += d * d;
    }
    const float inv = rsqrtf(group_reduce<SumOp>(sq, blockDim.x, slots + 32) * inv_length + eps);
    float scale = inv * (weight != nullptr ? widen(weight[ch]) : 1.0f);
    float shift = bias != nullptr ? widen(bias[ch]) : 0.0f;
    if (gamma != nullptr) {
        const float g = 1.0f + widen(gamma[b * gamma_stride + ch]);
        scale *= g;
        shift *= g;
    }
    if (beta != nullptr) shift += widen(beta[b * beta_stride + ch]);
    const float a = alpha != nullptr ? widen(alpha[ch]) : 1.0f;
    for (int l = threadIdx.x; l < length; l += blockDim.x)
        dst[l] = narrow<T>(activate((widen(src[l]) - mean) * scale + shift, act, slope, a));
}

template <typename T>
__device__ __forceinline__ void channel_norm(const T* x, T* y, const T* __restrict__ weight,
                                             const T* __restrict__ bias, long long positions,
                                             int channels, int length, float eps) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < positions;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long b = i / length;
        const long long base = b * channels * length + i % length;
        float acc = 0.0f;
        for (int ch = 0; ch < channels; ++ch)
            acc += widen(x[base + ch * static_cast<long long>(length)]);
        const float mean = acc / static_cast<float>(channels);
        float sq = 0.0f;
        for (int ch = 0; ch < channels; ++ch) {
            const float d = widen(x[base + ch * static_cast<long long>(length)]) - mean;
            sq += d * d;
        }
        const float inv = rsqrtf(sq / static_cast<float>(channels) + eps);
        for (int ch = 0; ch < channels; ++ch) {
            const long long at = base + ch * static_cast<long long>(length);
            float v = (widen(x[at]) - mean) * inv * widen(weight[ch]);
            if (bias != nullptr) v += widen(bias[ch]);
            y[at] = narrow<T>(v);
        }
    }
}

template <typename T>
__device__ __forceinline__ void snake(const T* x, T* y, const T* __restrict__ alpha,
                                      long long total, int channels, int length) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int ch = static_cast<int>((i / length) % channels);
        y[i] = narrow<T>(activate(widen(x[i]), kActSnake, 0.0f, widen(alpha[ch])));
    }
}

template <typename T>
__device__ __forceinline__ void leaky_relu(const T* x, T* y, long long total, float slope) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        y[i] = narrow<T>(activate(widen(x[i]), kActLeaky, slope, 1.0f));
}

#define PGK_CHANNELS(sfx, T)                                                                     \
    PGK_KERNEL(instance_norm_##sfx,                                                              \
               (const T* x, T* y, const T* weight, const T* bias, const T* gamma, const T* beta, \
                long long gamma_stride, long long beta_stride, const T* alpha, int channels,     \
                int length, float eps, int act, float slope)) {                                  \
        instance_norm<T>(x, y, weight, bias, gamma, beta, gamma_stride, beta_stride, alpha,      \
                         channels, length, eps, act, slope);                                     \
    }                                                                                            \
    PGK_KERNEL(channel_norm_##sfx, (const T* x, T* y, const T* weight, const T* bias,            \
                                    long long positions, int channels, int length, float eps)) { \
        channel_norm<T>(x, y, weight, bias, positions, channels, length, eps);                   \
    }                                                                                            \
    PGK_KERNEL(snake_##sfx,                                                                      \
               (const T* x, T* y, const T* alpha, long long total, int channels, int length)) {  \
        snake<T>(x, y, alpha, total, channels, length);                                          \
    }                                                                                            \
    PGK_KERNEL(leaky_relu_##sfx, (const T* x, T* y, long long total, float slope)) {             \
        leaky_relu<T>(x, y, total, slope);                                                       \
    }
PGK_FLOAT_TYPES(PGK_CHANNELS)

// Threads per block of every kernel of this file (instance_norm reduces over a whole block).
PGK_CONSTANT(CHANNELS_BLOCK, 256);
// The activation codes of instance_norm's `act`.
PGK_CONSTANT(ACT_NONE, kActNone);
PGK_CONSTANT(ACT_LEAKY_RELU, kActLeaky);
PGK_CONSTANT(ACT_SNAKE, kActSnake);
