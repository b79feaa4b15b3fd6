// Norms and activations over [B, C, L] signals (host side: ops/channels.py):
//
//   instance_norm_<dtype>  one block per (b, c) row of L samples: mean, then the variance of the
//                          centred values (two passes, no cancellation), then
//                          n = (x - mean) * rsqrt(var + eps) * w[c] + bias[c] and
//                          y = act(n * (1 + gamma[b, c]) + beta[b, c]), every factor optional
//                          (AdaIN when gamma/beta are given; act: none, LeakyReLU or Snake);
//   instance_stats_<dtype> the same statistics for long rows, split over `splits` blocks a row:
//   instance_apply_<dtype> each block writes its chunk's (mean, M2) of the centred values, then
//                          each block merges its row's partials (Chan's pairwise formula, no
//                          cancellation) and normalises its chunk. Two launches, but a row of
//                          50,000 samples no longer runs on one block (a batch-1 vocoder has
//                          64 rows: 64 busy SMs out of 132 and a serial row each);
//   channel_norm_<dtype>   LayerNorm over C at each (b, l): a block per 32 positions, each of its
//                          8 warps on every 8th channel (a warp's lanes on consecutive l, so its
//                          loads are coalesced), partial sums met in shared memory;
//   snake_<dtype>          y = x + sin(alpha[c] * x)^2 / alpha[c];
//   leaky_relu_<dtype>     y = x >= 0 ? x : slope * x, any shape.
//
// The instance norms take optional valid lengths [B] (int64) of a padded batch: row b's
// statistics cover its first lengths[b] samples, and the rest of the row is written as zeros
// (the zero padding the next convolution must see), in the same pass.
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

// Row b's valid samples: all of them without lengths.
__device__ __forceinline__ int valid_length(const long long* __restrict__ lengths, long long b,
                                            int length) {
    if (lengths == nullptr) return length;
    const long long n = lengths[b];
    return n < 0 ? 0 : (n < length ? static_cast<int>(n) : length);
}

// The affine part of one (b, c) row after its statistics: y = act((x - mean) * scale + shift).
// The mean is subtracted first: folding it into the shift cancels badly where the mean is large
// against the spread (the generator's residual stream).
struct RowAffine {
    float mean, scale, shift, alpha;
};

template <typename T>
__device__ __forceinline__ RowAffine
row_affine(float mean, float var, float eps, int ch, long long b, const T* __restrict__ weight,
           const T* __restrict__ bias, const T* __restrict__ gamma, const T* __restrict__ beta,
           long long gamma_stride, long long beta_stride, const T* __restrict__ alpha) {
    const float inv = rsqrtf(var + eps);
    float scale = inv * (weight != nullptr ? widen(weight[ch]) : 1.0f);
    float shift = bias != nullptr ? widen(bias[ch]) : 0.0f;
    if (gamma != nullptr) {
        const float g = 1.0f + widen(gamma[b * gamma_stride + ch]);
        scale *= g;
        shift *= g;
    }
    if (beta != nullptr) shift += widen(beta[b * beta_stride + ch]);
    return {mean, scale, shift, alpha != nullptr ? widen(alpha[ch]) : 1.0f};
}

template <typename T>
__device__ __forceinline__ void apply_row(const T* src, T* dst, int lo, int hi, int valid,
                                          const RowAffine& a, int act, float slope) {
    for (int l = lo + threadIdx.x; l < hi; l += blockDim.x)
        dst[l] = l < valid ? narrow<T>(activate((widen(src[l]) - a.mean) * a.scale + a.shift, act,
                                                slope, a.alpha))
                           : narrow<T>(0.0f);
}

template <typename T>
__device__ __forceinline__ void instance_norm(const T* x, T* y, const T* __restrict__ weight,
                                              const T* __restrict__ bias,
                                              const T* __restrict__ gamma,
                                              const T* __restrict__ beta, long long gamma_stride,
                                              long long beta_stride, const T* __restrict__ alpha,
                                              const long long* __restrict__ lengths, int channels,
                                              int length, float eps, int act, float slope) {
    __shared__ float slots[64];
    const long long row = blockIdx.x;  // b * channels + c
    const int ch = static_cast<int>(row % channels);
    const long long b = row / channels;
    const int valid = valid_length(lengths, b, length);
    const T* src = x + row * length;
    T* dst = y + row * length;
    float acc = 0.0f;
    for (int l = threadIdx.x; l < valid; l += blockDim.x) acc += widen(src[l]);
    const float inv_count = valid > 0 ? 1.0f / static_cast<float>(valid) : 0.0f;
    const float mean = group_reduce<SumOp>(acc, blockDim.x, slots) * inv_count;
    float sq = 0.0f;
    for (int l = threadIdx.x; l < valid; l += blockDim.x) {
        const float d = widen(src[l]) - mean;
        sq += d * d;
    }
    const float var = group_reduce<SumOp>(sq, blockDim.x, slots + 32) * inv_count;
    const RowAffine a = row_affine(mean, var, eps, ch, b, weight, bias, gamma, beta, gamma_stride,
                                   beta_stride, alpha);
    apply_row(src, dst, 0, length, valid, a, act, slope);
}

// One chunk's statistics: partial[2 * block] = (mean, M2) of its valid samples (0, 0 if none).
template <typename T>
__device__ __forceinline__ void instance_stats(const T* __restrict__ x, float* __restrict__ partial,
                                               const long long* __restrict__ lengths, int channels,
                                               int length, int splits, int chunk) {
    __shared__ float slots[64];
    const long long row = blockIdx.x / splits;
    const int split = static_cast<int>(blockIdx.x % splits);
    const int valid = valid_length(lengths, row / channels, length);
    const int lo = split * chunk;
    const int hi = min(lo + chunk, valid);
    const int n = hi > lo ? hi - lo : 0;
    const T* src = x + row * length;
    float acc = 0.0f;
    for (int l = lo + threadIdx.x; l < hi; l += blockDim.x) acc += widen(src[l]);
    const float sum = group_reduce<SumOp>(acc, blockDim.x, slots);
    const float mean = n > 0 ? sum / static_cast<float>(n) : 0.0f;
    float sq = 0.0f;
    for (int l = lo + threadIdx.x; l < hi; l += blockDim.x) {
        const float d = widen(src[l]) - mean;
        sq += d * d;
    }
    const float m2 = group_reduce<SumOp>(sq, blockDim.x, slots + 32);
    if (threadIdx.x == 0) {
        partial[2 * static_cast<long long>(blockIdx.x)] = mean;
        partial[2 * static_cast<long long>(blockIdx.x) + 1] = m2;
    }
}

// Chan et al.'s merge of two (count, mean, M2) summaries.
__device__ __forceinline__ void merge_stats(float& n, float& mean, float& m2, float nb, float mb,
                                            float m2b) {
    const float total = n + nb;
    if (total <= 0.0f) return;
    const float delta = mb - mean;
    const float wb = nb / total;
    m2 += m2b + delta * delta * n * wb;
    mean += delta * wb;
    n = total;
}

template <typename T>
__device__ __forceinline__ void instance_apply(
    const T* x, T* y, const float* __restrict__ partial, const T* __restrict__ weight,
    const T* __restrict__ bias, const T* __restrict__ gamma, const T* __restrict__ beta,
    long long gamma_stride, long long beta_stride, const T* __restrict__ alpha,
    const long long* __restrict__ lengths, int channels, int length, int splits, int chunk,
    float eps, int act, float slope) {
    __shared__ RowAffine affine;
    const long long row = blockIdx.x / splits;
    const int split = static_cast<int>(blockIdx.x % splits);
    const int ch = static_cast<int>(row % channels);
    const long long b = row / channels;
    const int valid = valid_length(lengths, b, length);
    if (threadIdx.x < 32) {  // warp 0 merges the row's partials
        float n = 0.0f, mean = 0.0f, m2 = 0.0f;
        for (int s = threadIdx.x; s < splits; s += 32) {
            const int lo = s * chunk;
            const int count = min(lo + chunk, valid) - lo;
            const float* p = partial + 2 * (row * splits + s);
            merge_stats(n, mean, m2, count > 0 ? static_cast<float>(count) : 0.0f, p[0], p[1]);
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float nb = __shfl_xor_sync(0xffffffffu, n, o);
            const float mb = __shfl_xor_sync(0xffffffffu, mean, o);
            const float m2b = __shfl_xor_sync(0xffffffffu, m2, o);
            merge_stats(n, mean, m2, nb, mb, m2b);
        }
        if (threadIdx.x == 0) {
            const float var = n > 0.0f ? m2 / n : 0.0f;
            affine = row_affine(mean, var, eps, ch, b, weight, bias, gamma, beta, gamma_stride,
                                beta_stride, alpha);
        }
    }
    __syncthreads();
    const RowAffine a = affine;
    const int lo = split * chunk;
    apply_row(x + row * length, y + row * length, lo, min(lo + chunk, length), valid, a, act,
              slope);
}

// Warps of a channel_norm block: each takes every kNormWarps-th channel of the block's 32
// positions, and the warps' partial sums meet in shared memory.
constexpr int kNormWarps = 8;

template <typename T>
__device__ __forceinline__ void channel_norm(const T* x, T* y, const T* __restrict__ weight,
                                             const T* __restrict__ bias, long long positions,
                                             int channels, int length, float eps) {
    __shared__ float partial[kNormWarps][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long tiles = (positions + 31) / 32;
    const float inv_channels = 1.0f / static_cast<float>(channels);
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const long long i = tile * 32 + lane;
        const bool active = i < positions;
        const long long b = active ? i / length : 0;
        const long long base = b * channels * length + (active ? i % length : 0);
        float acc = 0.0f;
        if (active)
            for (int ch = warp; ch < channels; ch += kNormWarps)
                acc += widen(x[base + ch * static_cast<long long>(length)]);
        partial[warp][lane] = acc;
        __syncthreads();
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kNormWarps; ++w) sum += partial[w][lane];
        const float mean = sum * inv_channels;
        __syncthreads();  // every warp has read its sums before they are overwritten
        float sq = 0.0f;
        if (active)
            for (int ch = warp; ch < channels; ch += kNormWarps) {
                const float d = widen(x[base + ch * static_cast<long long>(length)]) - mean;
                sq += d * d;
            }
        partial[warp][lane] = sq;
        __syncthreads();
        float total = 0.0f;
#pragma unroll
        for (int w = 0; w < kNormWarps; ++w) total += partial[w][lane];
        const float inv = rsqrtf(total * inv_channels + eps);
        __syncthreads();
        if (active)
            for (int ch = warp; ch < channels; ch += kNormWarps) {
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

#define PGK_CHANNELS(sfx, T)                                                                      \
    PGK_KERNEL(                                                                                   \
        instance_norm_##sfx,                                                                      \
        (const T* x, T* y, const T* weight, const T* bias, const T* gamma, const T* beta,         \
         long long gamma_stride, long long beta_stride, const T* alpha, const long long* lengths, \
         int channels, int length, float eps, int act, float slope)) {                            \
        instance_norm<T>(x, y, weight, bias, gamma, beta, gamma_stride, beta_stride, alpha,       \
                         lengths, channels, length, eps, act, slope);                             \
    }                                                                                             \
    PGK_KERNEL(instance_stats_##sfx, (const T* x, float* partial, const long long* lengths,       \
                                      int channels, int length, int splits, int chunk)) {         \
        instance_stats<T>(x, partial, lengths, channels, length, splits, chunk);                  \
    }                                                                                             \
    PGK_KERNEL(instance_apply_##sfx,                                                              \
               (const T* x, T* y, const float* partial, const T* weight, const T* bias,           \
                const T* gamma, const T* beta, long long gamma_stride, long long beta_stride,     \
                const T* alpha, const long long* lengths, int channels, int length, int splits,   \
                int chunk, float eps, int act, float slope)) {                                    \
        instance_apply<T>(x, y, partial, weight, bias, gamma, beta, gamma_stride, beta_stride,    \
                          alpha, lengths, channels, length, splits, chunk, eps, act, slope);      \
    }                                                                                             \
    PGK_KERNEL(channel_norm_##sfx, (const T* x, T* y, const T* weight, const T* bias,             \
                                    long long positions, int channels, int length, float eps)) {  \
        channel_norm<T>(x, y, weight, bias, positions, channels, length, eps);                    \
    }                                                                                             \
    PGK_KERNEL(snake_##sfx,                                                                       \
               (const T* x, T* y, const T* alpha, long long total, int channels, int length)) {   \
        snake<T>(x, y, alpha, total, channels, length);                                           \
    }                                                                                             \
    PGK_KERNEL(leaky_relu_##sfx, (const T* x, T* y, long long total, float slope)) {              \
        leaky_relu<T>(x, y, total, slope);                                                        \
    }
PGK_FLOAT_TYPES(PGK_CHANNELS)

// Threads per block of every kernel of this file (instance_norm reduces over a whole block;
// channel_norm needs exactly kNormWarps warps).
PGK_CONSTANT(CHANNELS_BLOCK, 256);
static_assert(kNormWarps * 32 == 256, "channel_norm's warps fill one CHANNELS_BLOCK block");
// Positions per channel_norm block.
PGK_CONSTANT(CHANNEL_NORM_POSITIONS, 32);
// Samples per block of the split instance norm (a row longer than this is split), and the most
// blocks one row is split over.
PGK_CONSTANT(INSTANCE_CHUNK, 2048);
PGK_CONSTANT(INSTANCE_MAX_SPLITS, 64);
// The activation codes of instance_norm's `act`.
PGK_CONSTANT(ACT_NONE, kActNone);
PGK_CONSTANT(ACT_LEAKY_RELU, kActLeaky);
PGK_CONSTANT(ACT_SNAKE, kActSnake);
