// Gated activations, embedding lookup and row softmax (host side: ops/activations.py).
//
//   gated_<dtype>_v<VEC>        out[r, i] = act(x[r, i]) * x[r, d + i] over a [rows, 2d] input
//                               (first half gate, second half up); act 0 = SiLU, 1 = GELU (tanh
//                               approximation), 2 = GELU (erf). fp32 math, one rounding.
//   embedding_w<BYTES>          out[i, :] = table[ids[i], :], copied in words of BYTES bytes;
//                               ids outside [0, vocab) give a row of zeros.
//   softmax_<dtype>_v<VEC>_n<NV> the row in registers: read once (16-byte packs), max, exp and sum,
//                               scaled and written (see normalization.cu for the row groups);
//   softmax_<dtype>_v<VEC>_s    rows too wide for registers: one block per row, three passes.
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

// ----------------------------------------------------------------------------- gated activations

__device__ __forceinline__ float activate(float g, int act) {
    if (act == 0) return g / (1.0f + expf(-g));
    if (act ==
        1) {  // 0.5 g (1 + tanh(u)) == g / (1 + exp(-2u)), without the cancellation at g << 0
        const float u = 0.7978845608028654f * (g + 0.044715f * g * g * g);
        return g / (1.0f + expf(-2.0f * u));
    }
    return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f));
}

template <typename T, int VEC>
__device__ __forceinline__ void gated_rows(const T* __restrict__ x, T* __restrict__ out,
                                           long long rows, int d, int act) {
    const int nvec = d / VEC;
    const long long total = rows * nvec;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += stride) {
        const long long r = i / nvec;
        const int c = static_cast<int>(i - r * nvec) * VEC;
        float g[VEC], u[VEC], y[VEC];
        load_f32<T, VEC>(x + r * 2 * d + c, g);
        load_f32<T, VEC>(x + r * 2 * d + d + c, u);
#pragma unroll
        for (int k = 0; k < VEC; ++k) y[k] = activate(g[k], act) * u[k];
        store_f32<T, VEC>(out + r * d + c, y);
    }
}

#define PGK_GATED(sfx, T, VEC)                                                               \
    PGK_KERNEL(gated_##sfx##_v##VEC, (const T* x, T* out, long long rows, int d, int act)) { \
        gated_rows<T, VEC>(x, out, rows, d, act);                                            \
    }
PGK_ROW_TYPES(PGK_GATED)

// ----------------------------------------------------------------------------- embedding

template <typename W>
__device__ __forceinline__ void embedding_rows(const void* __restrict__ ids, int ids64,
                                               const W* __restrict__ table, W* __restrict__ out,
                                               long long n_ids, long long vocab, int words) {
    const long long total = n_ids * words;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += stride) {
        const long long t = i / words;
        const int c = static_cast<int>(i - t * words);
        const long long id = ids64 ? static_cast<const long long*>(ids)[t]
                                   : static_cast<long long>(static_cast<const int*>(ids)[t]);
        W value{};
        if (id >= 0 && id < vocab) value = table[id * words + c];
        out[i] = value;
    }
}

// Words of 1, 2, 4, 8 and 16 bytes: embedding_w<BYTES>.
#define PGK_EMBEDDING(bytes, W)                                                         \
    PGK_KERNEL(embedding_w##bytes, (const void* ids, int ids64, const W* table, W* out, \
                                    long long n_ids, long long vocab, int words)) {     \
        embedding_rows<W>(ids, ids64, table, out, n_ids, vocab, words);                 \
    }
PGK_EMBEDDING(1, unsigned char)
PGK_EMBEDDING(2, unsigned short)
PGK_EMBEDDING(4, unsigned int)
PGK_EMBEDDING(8, unsigned long long)
PGK_EMBEDDING(16, uint4)

// ----------------------------------------------------------------------------- softmax

// exp(x) as one ex2.approx (relative error ~2^-22, far below the fp32 test limit).
__device__ __forceinline__ float fast_exp(float x) { return exp2f(x * 1.4426950408889634f); }

template <typename T, int VEC, int NV>
__device__ __forceinline__ void softmax_rows(const T* __restrict__ x, T* __restrict__ out,
                                             long long rows, int width, int group) {
    __shared__ float slots[64];
    const int rows_per_block = blockDim.x / group;
    const int lane = threadIdx.x % group;
    const long long row = static_cast<long long>(blockIdx.x) * rows_per_block + threadIdx.x / group;
    const bool live = row < rows;
    const int nvec = width / VEC;
    const long long base = row * width;

    float v[NV][VEC];
    float m = MaxOp::identity();
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int c = lane + j * group;
        if (live && c < nvec) {
            const Pack<T, VEC> a = load_stream<T, VEC>(x + base + c * VEC);
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[j][k] = widen(a.v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[j][k] = MaxOp::identity();
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[j][k]);
    }
    m = group_reduce<MaxOp>(m, group, slots);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        if (lane + j * group < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                v[j][k] = fast_exp(v[j][k] - m);
                s += v[j][k];
            }
        }
    }
    const float inv = 1.0f / group_reduce<SumOp>(s, group, slots + 32);
    if (!live) return;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int c = lane + j * group;
        if (c < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[j][k] *= inv;
            store_stream_f32<T, VEC>(out + base + c * VEC, v[j]);
        }
    }
}

template <typename T, int VEC>
__device__ __forceinline__ void softmax_rows_streaming(const T* __restrict__ x, T* __restrict__ out,
                                                       long long rows, int width, int group) {
    __shared__ float slots[64];
    const long long base = static_cast<long long>(blockIdx.x) * width;
    const int nvec = width / VEC;
    float m = MaxOp::identity();
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
        float v[VEC];
        load_f32<T, VEC>(x + base + c * VEC, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[k]);
    }
    m = group_reduce<MaxOp>(m, group, slots);
    float s = 0.0f;
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
        float v[VEC];
        load_f32<T, VEC>(x + base + c * VEC, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) s += fast_exp(v[k] - m);
    }
    const float inv = 1.0f / group_reduce<SumOp>(s, group, slots + 32);
    for (int c = threadIdx.x; c < nvec; c += blockDim.x) {
        float v[VEC];
        load_f32<T, VEC>(x + base + c * VEC, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = fast_exp(v[k] - m) * inv;
        store_f32<T, VEC>(out + base + c * VEC, v);
    }
}

// Entry points: softmax_<dtype>_v<VEC>_n<NV> (row in registers) and softmax_<dtype>_v<VEC>_s.
#define PGK_SOFTMAX(sfx, T, VEC)                                                \
    PGK_ROW_KERNELS(softmax, sfx, T, VEC,                                       \
                    (const T* x, T* out, long long rows, int width, int group), \
                    (x, out, rows, width, group), softmax_rows, softmax_rows_streaming)
PGK_ROW_TYPES(PGK_SOFTMAX)
