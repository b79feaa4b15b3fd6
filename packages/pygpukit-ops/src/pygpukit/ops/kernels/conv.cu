// 1-D convolution and transposed convolution over [B, C, L] signals (host side: ops/conv.py).
// The dense work runs through the runtime's matmul (tensor cores for 16-bit types, fp32
// accumulation); these kernels move the data around it:
//
//   conv_im2col_<dtype>     x [B, C, L] -> cols [B, C*K, L_out], cols[b, c*K + k, t] =
//                           x[b, c, t*stride - pad + k*dilation] (0 outside the signal), so a
//                           grouped convolution is one batched GEMM W[g] @ cols[b, g];
//   conv_depthwise_<dtype>  groups with one input channel each (depthwise and its channel
//                           multipliers): a direct kernel, one thread per output, fp32 sums;
//   conv_col2im_<dtype>     the transposed convolution's gather: out[b, o, t] = bias[o] +
//                           sum over k of cols[b, o*K + k, l] where l*stride = t + pad - k*dil;
//   conv_transpose_direct_<dtype>  the transposed convolution of groups of one input channel;
//   conv_bias_<dtype>       y[b, o, t] += bias[o] in place, after the GEMM.
//
// Every kernel is a grid-stride loop over its outputs (64-bit indices), consecutive threads on
// consecutive positions t, so each warp reads and writes contiguous runs.
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

template <typename T>
__device__ __forceinline__ void im2col(const T* __restrict__ x, T* __restrict__ cols,
                                       long long total, int channels, int length, int kernel,
                                       int out_length, int stride, int pad, int dilation) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = static_cast<int>(i % out_length);
        long long r = i / out_length;
        const int k = static_cast<int>(r % kernel);
        r /= kernel;  // r = b * channels + c
        const long long pos =
            static_cast<long long>(t) * stride - pad + static_cast<long long>(k) * dilation;
        cols[i] = (pos >= 0 && pos < length) ? x[r * length + pos] : narrow<T>(0.0f);
    }
}

template <typename T>
__device__ __forceinline__ void depthwise(const T* __restrict__ x, const T* __restrict__ weight,
                                          const T* __restrict__ bias, T* __restrict__ y,
                                          long long total, int in_channels, int out_channels,
                                          int length, int kernel, int out_length, int stride,
                                          int pad, int dilation) {
    const int multiplier = out_channels / in_channels;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = static_cast<int>(i % out_length);
        const long long r = i / out_length;  // b * out_channels + o
        const int o = static_cast<int>(r % out_channels);
        const long long b = r / out_channels;
        const T* row = x + (b * in_channels + o / multiplier) * length;
        const T* w = weight + static_cast<long long>(o) * kernel;
        const long long start = static_cast<long long>(t) * stride - pad;
        float acc = bias != nullptr ? widen(bias[o]) : 0.0f;
        for (int k = 0; k < kernel; ++k) {
            const long long pos = start + static_cast<long long>(k) * dilation;
            if (pos >= 0 && pos < length) acc += widen(w[k]) * widen(row[pos]);
        }
        y[i] = narrow<T>(acc);
    }
}

template <typename T>
__device__ __forceinline__ void col2im(const T* __restrict__ cols, const T* __restrict__ bias,
                                       T* __restrict__ y, long long total, int out_channels,
                                       int in_length, int kernel, int out_length, int stride,
                                       int pad, int dilation) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = static_cast<int>(i % out_length);
        const long long r = i / out_length;  // b * out_channels + o
        const int o = static_cast<int>(r % out_channels);
        const T* src = cols + r * kernel * in_length;
        float acc = bias != nullptr ? widen(bias[o]) : 0.0f;
        for (int k = 0; k < kernel; ++k) {
            const long long num =
                static_cast<long long>(t) + pad - static_cast<long long>(k) * dilation;
            if (num < 0 || num % stride != 0) continue;
            const long long l = num / stride;
            if (l < in_length) acc += widen(src[static_cast<long long>(k) * in_length + l]);
        }
        y[i] = narrow<T>(acc);
    }
}

// Groups of one input channel: output channel o reads input channel o / (C_out / C_in), and its
// weights are row o of weight [C_in, C_out/C_in, K] seen as [C_out, K].
template <typename T>
__device__ __forceinline__ void transpose_direct(const T* __restrict__ x,
                                                 const T* __restrict__ weight,
                                                 const T* __restrict__ bias, T* __restrict__ y,
                                                 long long total, int in_channels, int out_channels,
                                                 int in_length, int kernel, int out_length,
                                                 int stride, int pad, int dilation) {
    const int multiplier = out_channels / in_channels;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int t = static_cast<int>(i % out_length);
        const long long r = i / out_length;  // b * out_channels + o
        const int o = static_cast<int>(r % out_channels);
        const long long b = r / out_channels;
        const T* row = x + (b * in_channels + o / multiplier) * in_length;
        const T* w = weight + static_cast<long long>(o) * kernel;
        float acc = bias != nullptr ? widen(bias[o]) : 0.0f;
        for (int k = 0; k < kernel; ++k) {
            const long long num =
                static_cast<long long>(t) + pad - static_cast<long long>(k) * dilation;
            if (num < 0 || num % stride != 0) continue;
            const long long l = num / stride;
            if (l < in_length) acc += widen(w[k]) * widen(row[l]);
        }
        y[i] = narrow<T>(acc);
    }
}

template <typename T>
__device__ __forceinline__ void bias_add(T* __restrict__ y, const T* __restrict__ bias,
                                         long long total, int channels, int length) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int o = static_cast<int>((i / length) % channels);
        y[i] = narrow<T>(widen(y[i]) + widen(bias[o]));
    }
}

#define PGK_CONV(sfx, T)                                                                          \
    PGK_KERNEL(conv_im2col_##sfx,                                                                 \
               (const T* x, T* cols, long long total, int channels, int length, int kernel,       \
                int out_length, int stride, int pad, int dilation)) {                             \
        im2col<T>(x, cols, total, channels, length, kernel, out_length, stride, pad, dilation);   \
    }                                                                                             \
    PGK_KERNEL(conv_depthwise_##sfx,                                                              \
               (const T* x, const T* weight, const T* bias, T* y, long long total,                \
                int in_channels, int out_channels, int length, int kernel, int out_length,        \
                int stride, int pad, int dilation)) {                                             \
        depthwise<T>(x, weight, bias, y, total, in_channels, out_channels, length, kernel,        \
                     out_length, stride, pad, dilation);                                          \
    }                                                                                             \
    PGK_KERNEL(conv_col2im_##sfx,                                                                 \
               (const T* cols, const T* bias, T* y, long long total, int out_channels,            \
                int in_length, int kernel, int out_length, int stride, int pad, int dilation)) {  \
        col2im<T>(cols, bias, y, total, out_channels, in_length, kernel, out_length, stride, pad, \
                  dilation);                                                                      \
    }                                                                                             \
    PGK_KERNEL(conv_transpose_direct_##sfx,                                                       \
               (const T* x, const T* weight, const T* bias, T* y, long long total,                \
                int in_channels, int out_channels, int in_length, int kernel, int out_length,     \
                int stride, int pad, int dilation)) {                                             \
        transpose_direct<T>(x, weight, bias, y, total, in_channels, out_channels, in_length,      \
                            kernel, out_length, stride, pad, dilation);                           \
    }                                                                                             \
    PGK_KERNEL(conv_bias_##sfx,                                                                   \
               (T * y, const T* bias, long long total, int channels, int length)) {               \
        bias_add<T>(y, bias, total, channels, length);                                            \
    }
PGK_FLOAT_TYPES(PGK_CONV)

// Threads per block of every conv kernel.
PGK_CONSTANT(CONV_BLOCK, 256);
