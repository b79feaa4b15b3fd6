// RMSNorm and LayerNorm over the last axis, with the fused residual-add forms
// (host side: ops/normalization.py). One entry point per dtype, vector width and register bucket:
//
//   norm_<dtype>_v<VEC>_n<NV>   the row held in registers: each thread of the row's group keeps NV
//                               packs of VEC elements, read once from global memory, reduced, then
//                               scaled and written (VEC * sizeof(T) = 16 bytes, or VEC = 1 when the
//                               width or a pointer is not 16-byte aligned);
//   norm_<dtype>_v<VEC>_s       rows too wide for registers: one block per row, re-reading the
//                               row from global memory for each pass.
//
// `layer` = 0: RMSNorm, y = x * rsqrt(mean(x^2) + eps) * w.
// `layer` = 1: LayerNorm, y = (x - mean) * rsqrt(var + eps) * w (+ b), the variance computed as
//              mean((x - mean)^2) from the held row (two-pass, no cancellation).
// `residual` non-null: s = round_T(x + residual) is written to `sum_out` and normalised (HF and
// vLLM round the sum to the activation dtype before the norm; so do we). fp32 accumulation; the
// output is rounded to T once.
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

template <typename T, int VEC, int NV>
__device__ __forceinline__ void norm_rows(const T* __restrict__ x, const T* __restrict__ residual,
                                          const T* __restrict__ weight, const T* __restrict__ bias,
                                          T* __restrict__ out, T* __restrict__ sum_out,
                                          long long rows, int width, int group, float eps,
                                          int layer) {
    __shared__ float slots[64];
    using P = Pack<T, VEC>;
    const int rows_per_block = blockDim.x / group;
    const int lane = threadIdx.x % group;
    const long long row = static_cast<long long>(blockIdx.x) * rows_per_block + threadIdx.x / group;
    const bool live = row < rows;
    const int nvec = width / VEC;
    const long long base = row * width;

    // The row stays in registers in its storage type (half the registers of fp32 for 16-bit
    // types, so more rows fit on an SM); the residual sum is rounded to T anyway.
    P v[NV];
    // All loads are issued before any use, so a thread has its NV packs in flight at once.
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int c = lane + j * group;
        if (live && c < nvec) v[j] = load_stream<T, VEC>(x + base + c * VEC);
    }
    if (residual != nullptr) {
        P r[NV];
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const int c = lane + j * group;
            if (live && c < nvec) r[j] = load_stream<T, VEC>(residual + base + c * VEC);
        }
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const int c = lane + j * group;
            if (live && c < nvec) {
#pragma unroll
                for (int k = 0; k < VEC; ++k)
                    v[j].v[k] = narrow<T>(widen(v[j].v[k]) + widen(r[j].v[k]));
                store_stream<T, VEC>(sum_out + base + c * VEC, v[j]);
            }
        }
    }
    // The norm weight's packs, loaded now: their latency hides under the reduction (its barrier
    // would otherwise hold them back to after it, one more round trip to L2 per row).
    P wp[NV];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int c = lane + j * group;
        if (live && c < nvec) wp[j] = *reinterpret_cast<const P*>(weight + c * VEC);
    }
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        if (live && lane + j * group < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const float f = widen(v[j].v[k]);
                acc += layer ? f : f * f;
            }
        }
    }
    const float inv_width = 1.0f / static_cast<float>(width);
    float mean = 0.0f;
    float inv;
    if (layer) {
        mean = group_reduce<SumOp>(acc, group, slots) * inv_width;
        float sq = 0.0f;
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            if (live && lane + j * group < nvec) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    const float d = widen(v[j].v[k]) - mean;
                    sq += d * d;
                }
            }
        }
        inv = rsqrtf(group_reduce<SumOp>(sq, group, slots + 32) * inv_width + eps);
    } else {
        inv = rsqrtf(group_reduce<SumOp>(acc, group, slots) * inv_width + eps);
    }
    if (!live) return;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int c = lane + j * group;
        if (c < nvec) {
            float y[VEC];
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                y[k] = (widen(v[j].v[k]) - mean) * inv * widen(wp[j].v[k]);
            if (bias != nullptr) {
                float b[VEC];
                load_f32<T, VEC>(bias + c * VEC, b);
#pragma unroll
                for (int k = 0; k < VEC; ++k) y[k] += b[k];
            }
            store_stream_f32<T, VEC>(out + base + c * VEC, y);
        }
    }
}

// One block per row (group == blockDim.x), for rows wider than the register buckets hold.
// With a residual, the first pass writes the rounded sum and later passes read it back (each
// thread reads only the elements it wrote itself).
template <typename T, int VEC>
__device__ __forceinline__ void norm_rows_streaming(const T* __restrict__ x,
                                                    const T* __restrict__ residual,
                                                    const T* __restrict__ weight,
                                                    const T* __restrict__ bias, T* __restrict__ out,
                                                    T* sum_out, long long rows, int width,
                                                    int group, float eps, int layer) {
    __shared__ float slots[64];
    const long long row = blockIdx.x;
    const int nvec = width / VEC;
    const long long base = row * width;
    const T* src = residual != nullptr ? sum_out : x;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
        float v[VEC];
        load_f32<T, VEC>(x + base + c * VEC, v);
        if (residual != nullptr) {
            float r[VEC];
            load_f32<T, VEC>(residual + base + c * VEC, r);
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[k] = widen(narrow<T>(v[k] + r[k]));
            store_f32<T, VEC>(sum_out + base + c * VEC, v);
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc += layer ? v[k] : v[k] * v[k];
    }
    const float inv_width = 1.0f / static_cast<float>(width);
    float mean = 0.0f;
    float inv;
    if (layer) {
        mean = group_reduce<SumOp>(acc, group, slots) * inv_width;
        float sq = 0.0f;
        for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
            float v[VEC];
            load_f32<T, VEC>(src + base + c * VEC, v);
#pragma unroll
            for (int k = 0; k < VEC; ++k) sq += (v[k] - mean) * (v[k] - mean);
        }
        inv = rsqrtf(group_reduce<SumOp>(sq, group, slots + 32) * inv_width + eps);
    } else {
        inv = rsqrtf(group_reduce<SumOp>(acc, group, slots) * inv_width + eps);
    }
    if (row >= rows) return;
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
        float v[VEC], w[VEC], y[VEC];
        load_f32<T, VEC>(src + base + c * VEC, v);
        load_f32<T, VEC>(weight + c * VEC, w);
#pragma unroll
        for (int k = 0; k < VEC; ++k) y[k] = (v[k] - mean) * inv * w[k];
        if (bias != nullptr) {
            float b[VEC];
            load_f32<T, VEC>(bias + c * VEC, b);
#pragma unroll
            for (int k = 0; k < VEC; ++k) y[k] += b[k];
        }
        store_f32<T, VEC>(out + base + c * VEC, y);
    }
}

// Entry points: norm_<dtype>_v<VEC>_n<NV> (row in registers) and norm_<dtype>_v<VEC>_s (streaming).
#define PGK_NORM(sfx, T, VEC)                                                                  \
    PGK_ROW_KERNELS(norm, sfx, T, VEC,                                                         \
                    (const T* x, const T* residual, const T* weight, const T* bias, T* out,    \
                     T* sum_out, long long rows, int width, int group, float eps, int layer),  \
                    (x, residual, weight, bias, out, sum_out, rows, width, group, eps, layer), \
                    norm_rows, norm_rows_streaming)
PGK_ROW_TYPES(PGK_NORM)
