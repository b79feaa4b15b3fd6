// Rotary position embeddings on q and k in one launch (host side: ops/rope.py).
//
//   rope_<dtype>(q, k, q_out, k_out, cos, sin, positions, ...)
//
// q is [tokens, q_heads, head_dim], k [tokens, kv_heads, head_dim], both C-contiguous; cos and
// sin are [max_pos, rotary_dim / 2] tables (fp32 or the dtype of q), positions one int32 or int64
// per token. Block b handles token b: every (head, pair) of q then k. The pair of element i of
// the rotated part is (i, i + rotary_dim / 2) in the NeoX layout and (2i, 2i + 1) in the GPT-J
// layout:  y0 = x0 cos - x1 sin,  y1 = x1 cos + x0 sin  (fp32 math, rounded once).
// Dimensions past rotary_dim pass through (copied when q_out/k_out are other arrays). A position
// outside [0, max_pos) rotates by angle 0 (the values are passed through unchanged).
//
// flags: bit 0 positions are int64; bit 1 GPT-J layout; bit 2 copy the pass-through dims;
// bits 4-5 the table dtype (0 fp32, 1 fp16, 2 bf16).
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

__device__ __forceinline__ float table_at(const void* __restrict__ t, long long i, int kind) {
    if (kind == 1) return __half2float(static_cast<const __half*>(t)[i]);
    if (kind == 2) return __bfloat162float(static_cast<const __nv_bfloat16*>(t)[i]);
    return static_cast<const float*>(t)[i];
}

template <typename T>
__device__ __forceinline__ void rope_token(const T* q, const T* k, T* q_out, T* k_out,
                                           const void* __restrict__ cos_table,
                                           const void* __restrict__ sin_table,
                                           const void* __restrict__ positions, long long max_pos,
                                           int q_heads, int kv_heads, int head_dim, int rotary_dim,
                                           int flags) {
    const long long t = blockIdx.x;
    const long long pos = (flags & 1)
                              ? static_cast<const long long*>(positions)[t]
                              : static_cast<long long>(static_cast<const int*>(positions)[t]);
    const bool in_range = pos >= 0 && pos < max_pos;
    const bool gptj = (flags & 2) != 0;
    const int kind = (flags >> 4) & 3;
    const int half = rotary_dim / 2;
    const int heads = q_heads + kv_heads;
    for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {
        const int h = i / half;
        const int j = i - h * half;
        const bool is_q = h < q_heads;
        const long long off =
            is_q ? (t * q_heads + h) * head_dim : (t * kv_heads + (h - q_heads)) * head_dim;
        const T* src = (is_q ? q : k) + off;
        T* dst = (is_q ? q_out : k_out) + off;
        float c = 1.0f, s = 0.0f;
        if (in_range) {
            c = table_at(cos_table, pos * half + j, kind);
            s = table_at(sin_table, pos * half + j, kind);
        }
        const int i0 = gptj ? 2 * j : j;
        const int i1 = gptj ? 2 * j + 1 : j + half;
        const float x0 = widen(src[i0]), x1 = widen(src[i1]);
        dst[i0] = narrow<T>(x0 * c - x1 * s);
        dst[i1] = narrow<T>(x1 * c + x0 * s);
    }
    if ((flags & 4) == 0 || rotary_dim == head_dim) return;
    const int rest = head_dim - rotary_dim;
    for (int i = threadIdx.x; i < heads * rest; i += blockDim.x) {
        const int h = i / rest;
        const int j = rotary_dim + (i - h * rest);
        const bool is_q = h < q_heads;
        const long long off =
            is_q ? (t * q_heads + h) * head_dim : (t * kv_heads + (h - q_heads)) * head_dim;
        ((is_q ? q_out : k_out) + off)[j] = ((is_q ? q : k) + off)[j];
    }
}

#define PGK_ROPE(sfx, T)                                                                           \
    PGK_KERNEL(rope_##sfx, (const T* q, const T* k, T* q_out, T* k_out, const void* cos_table,     \
                            const void* sin_table, const void* positions, long long max_pos,       \
                            int q_heads, int kv_heads, int head_dim, int rotary_dim, int flags)) { \
        rope_token<T>(q, k, q_out, k_out, cos_table, sin_table, positions, max_pos, q_heads,       \
                      kv_heads, head_dim, rotary_dim, flags);                                      \
    }
PGK_FLOAT_TYPES(PGK_ROPE)
