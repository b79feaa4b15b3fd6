// Rotary position embeddings on q and k in one launch (host side: ops/rope.py).
//
//   rope_<dtype>(q, k, q_out, k_out, cos, sin, positions, ...)
//
// q is [tokens, q_heads, head_dim], k [tokens, kv_heads, head_dim], both C-contiguous; cos and
// sin are [max_pos, rotary_dim / 2] tables (fp32 or the dtype of q), positions one int32 or int64
// per token. Block b handles token b: every (head, pair) of q then k. The pair of element i of
// the rotated part is (i, i + rotary_dim / 2) in the NeoX layout and (2i, 2i + 1) in the GPT-J
// layout:  y0 = x0 cos - x1 sin,  y1 = x1 cos + x0 sin  (fp32 math, rounded once; the fmaf
// roundings of layers.cuh's rope_pair, which every RoPE kernel shares).
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
        const float2 rot = rope_pair(widen(src[i0]), widen(src[i1]), c, s);
        dst[i0] = narrow<T>(rot.x);
        dst[i1] = narrow<T>(rot.y);
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

// A decode or prefill step's q/k/v straight from the fused projection, in one launch (host side:
// ops/rope.py, rope_kv_append):
//
//   rope_kv_append_<dtype>(qkv, q_out, k_cache, v_cache, cos, sin, positions, slots, max_pos,
//                          q_heads, kv_heads, head_dim, seq, max_len, kind)
//
// qkv is [B * seq, (q_heads + 2 kv_heads) * head_dim], each row the q heads, then the k heads,
// then the v heads (the fused weight's row order). Block t handles token t = b * seq + s: q
// rotated into q_out [B * seq, q_heads, head_dim]; k rotated and v as is into k_cache and v_cache
// [B, kv_heads, max_len, head_dim] at row slots[t]. NeoX pairs (i, i + head_dim / 2) over the
// whole head, fp32 math rounded once: the same values as slicing, rope_<dtype> and kv_append.
// positions and slots are int32 [B * seq]; a position outside [0, max_pos) rotates by angle 0 (as
// rope_<dtype>), a slot outside [0, max_len) stores nothing. kind: the table dtype (0 fp32, 1
// fp16, 2 bf16).
//
// KvAppendToken: what block t of either kernel starts from, filled once at its top. The range
// flags are one unsigned compare each (a negative position or slot wraps past the bound): the
// form the compiler keeps as a select in the rotation loops instead of unswitching them.
template <typename T>
struct KvAppendToken {
    long long t;     // the token: row t of qkv and of q_out
    long long b;     // its sequence: the cache row b
    long long pos;   // its position in the cos/sin tables
    long long slot;  // its row in the caches
    bool in_range;   // pos inside the tables: else angle 0
    bool store;      // slot inside the caches: else k and v are not written (q still is)
    int rotated;     // heads to rotate: the q heads, then the k heads when stored
    const T* row;    // the token's qkv row: q heads, k heads, v heads

    __device__ __forceinline__ KvAppendToken(const T* __restrict__ qkv,
                                             const int* __restrict__ positions,
                                             const int* __restrict__ slots, long long max_pos,
                                             int q_heads, int kv_heads, int head_dim, int seq,
                                             int max_len)
        : t(blockIdx.x),
          b(t / seq),
          pos(positions[t]),
          slot(slots[t]),
          in_range(static_cast<unsigned long long>(pos) < static_cast<unsigned long long>(max_pos)),
          store(static_cast<unsigned long long>(slot) < static_cast<unsigned long long>(max_len)),
          rotated(q_heads + (store ? kv_heads : 0)),
          row(qkv + t * static_cast<long long>(q_heads + 2 * kv_heads) * head_dim) {}

    // Row h of this token's slot in a [B, kv_heads, max_len, head_dim] cache. __restrict__: a
    // cache is written, never read, and aliases no input, so the compiler keeps the qkv and
    // table loads on the read-only path.
    __device__ __forceinline__ T* cache_row(T* __restrict__ cache, int h, int kv_heads, int max_len,
                                            int head_dim) const {
        return cache + ((b * kv_heads + h) * max_len + slot) * head_dim;
    }
};

template <typename T>
__device__ __forceinline__ void rope_kv_append_token(
    const T* __restrict__ qkv, T* __restrict__ q_out, T* __restrict__ k_cache,
    T* __restrict__ v_cache, const void* __restrict__ cos_table, const void* __restrict__ sin_table,
    const int* __restrict__ positions, const int* __restrict__ slots, long long max_pos,
    int q_heads, int kv_heads, int head_dim, int seq, int max_len, int kind) {
    const KvAppendToken<T> tok(qkv, positions, slots, max_pos, q_heads, kv_heads, head_dim, seq,
                               max_len);
    const int half = head_dim / 2;
    for (int i = threadIdx.x; i < tok.rotated * half; i += blockDim.x) {
        const int h = i / half;
        const int j = i - h * half;
        float c = 1.0f, s = 0.0f;
        if (tok.in_range) {
            c = table_at(cos_table, tok.pos * half + j, kind);
            s = table_at(sin_table, tok.pos * half + j, kind);
        }
        const T* src = tok.row + static_cast<long long>(h) * head_dim;
        T* dst = h < q_heads ? q_out + (tok.t * q_heads + h) * head_dim
                             : tok.cache_row(k_cache, h - q_heads, kv_heads, max_len, head_dim);
        const float2 rot = rope_pair(widen(src[j]), widen(src[j + half]), c, s);
        dst[j] = narrow<T>(rot.x);
        dst[j + half] = narrow<T>(rot.y);
    }
    if (!tok.store) return;
    const T* v = tok.row + static_cast<long long>(q_heads + kv_heads) * head_dim;
    for (int i = threadIdx.x; i < kv_heads * head_dim; i += blockDim.x) {
        const int h = i / head_dim;
        tok.cache_row(v_cache, h, kv_heads, max_len, head_dim)[i - h * head_dim] = v[i];
    }
}

#define PGK_ROPE_KV_APPEND(sfx, T)                                                                \
    PGK_KERNEL(rope_kv_append_##sfx,                                                              \
               (const T* qkv, T* q_out, T* k_cache, T* v_cache, const void* cos_table,            \
                const void* sin_table, const int* positions, const int* slots, long long max_pos, \
                int q_heads, int kv_heads, int head_dim, int seq, int max_len, int kind)) {       \
        rope_kv_append_token<T>(qkv, q_out, k_cache, v_cache, cos_table, sin_table, positions,    \
                                slots, max_pos, q_heads, kv_heads, head_dim, seq, max_len, kind); \
    }
PGK_FLOAT_TYPES(PGK_ROPE_KV_APPEND)

// rope_kv_append_vec_<dtype>: the same launch, arguments and values, with 16-byte accesses.
// Each thread rotates VEC = 16 / sizeof(T) consecutive pairs of one head (VEC elements at j and
// at j + head_dim / 2) or copies VEC elements of one value head, so a 1024-token prefill moves
// its q/k/v at the memory's pace instead of two bytes per access. The host launches it when
// head_dim / 2 is a multiple of VEC and qkv, q_out and both caches start on 16-byte boundaries
// (every row then does: head_dim * sizeof(T) is a multiple of 32).
template <typename T>
__device__ __forceinline__ void rope_kv_append_vec_token(
    const T* __restrict__ qkv, T* __restrict__ q_out, T* __restrict__ k_cache,
    T* __restrict__ v_cache, const void* __restrict__ cos_table, const void* __restrict__ sin_table,
    const int* __restrict__ positions, const int* __restrict__ slots, long long max_pos,
    int q_heads, int kv_heads, int head_dim, int seq, int max_len, int kind) {
    constexpr int VEC = 16 / sizeof(T);
    const KvAppendToken<T> tok(qkv, positions, slots, max_pos, q_heads, kv_heads, head_dim, seq,
                               max_len);
    const int half = head_dim / 2, groups = half / VEC;
    const int rotated = tok.rotated * groups;
    const int copied = tok.store ? kv_heads * (head_dim / VEC) : 0;
    for (int i = threadIdx.x; i < rotated + copied; i += blockDim.x) {
        if (i < rotated) {
            const int h = i / groups;
            const int j = (i - h * groups) * VEC;
            const T* src = tok.row + static_cast<long long>(h) * head_dim;
            T* dst = h < q_heads ? q_out + (tok.t * q_heads + h) * head_dim
                                 : tok.cache_row(k_cache, h - q_heads, kv_heads, max_len, head_dim);
            float x0[VEC], x1[VEC], y0[VEC], y1[VEC];
            load_f32<T, VEC>(src + j, x0);
            load_f32<T, VEC>(src + j + half, x1);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                float c = 1.0f, s = 0.0f;
                if (tok.in_range) {
                    c = table_at(cos_table, tok.pos * half + j + e, kind);
                    s = table_at(sin_table, tok.pos * half + j + e, kind);
                }
                const float2 rot = rope_pair(x0[e], x1[e], c, s);
                y0[e] = rot.x;
                y1[e] = rot.y;
            }
            store_f32<T, VEC>(dst + j, y0);
            store_f32<T, VEC>(dst + j + half, y1);
        } else {
            const int e = (i - rotated) * VEC;
            const int h = e / head_dim;
            const T* v = tok.row + static_cast<long long>(q_heads + kv_heads) * head_dim + e;
            T* dst = tok.cache_row(v_cache, h, kv_heads, max_len, head_dim) + (e - h * head_dim);
            *reinterpret_cast<Pack<T, VEC>*>(dst) = *reinterpret_cast<const Pack<T, VEC>*>(v);
        }
    }
}

#define PGK_ROPE_KV_APPEND_VEC(sfx, T)                                                             \
    PGK_KERNEL(rope_kv_append_vec_##sfx,                                                           \
               (const T* qkv, T* q_out, T* k_cache, T* v_cache, const void* cos_table,             \
                const void* sin_table, const int* positions, const int* slots, long long max_pos,  \
                int q_heads, int kv_heads, int head_dim, int seq, int max_len, int kind)) {        \
        rope_kv_append_vec_token<T>(qkv, q_out, k_cache, v_cache, cos_table, sin_table, positions, \
                                    slots, max_pos, q_heads, kv_heads, head_dim, seq, max_len,     \
                                    kind);                                                         \
    }
PGK_FLOAT_TYPES(PGK_ROPE_KV_APPEND_VEC)

// A batched decode step's q/k/v straight from the fused projection into a paged cache, in one
// launch (host side: ops/rope_paged.py, rope_kv_paged_write):
//
//   rope_kv_paged_<dtype>(qkv, q_out, k_cache, v_cache, cos, sin, positions, slots, max_pos,
//                         q_heads, kv_heads, head_dim, block_size, num_blocks, kind)
//
// qkv is [tokens, (q_heads + 2 kv_heads) * head_dim] (q heads, k heads, v heads per row); q is
// rotated into q_out [tokens, q_heads, head_dim]; k rotated and v as is go into the paged caches
// [num_blocks, kv_heads, block_size, head_dim] at slot slots[t] = block * block_size + offset (a
// negative slot, or one past the last block, stores nothing: padding rows). The same values as
// slicing, rope_<dtype> and kv_paged_write, bit for bit: NeoX pairs over the whole head,
// rope_pair's roundings. Grid (tokens, spread): the token's
// (q_heads + 2 kv_heads) * head_dim / 2 pairs are spread over gridDim.y blocks, one pair a
// thread, so a step of a few dozen tokens still fills the GPU. kind: the table dtype.
template <typename T>
__device__ __forceinline__ void rope_kv_paged_token(
    const T* __restrict__ qkv, T* __restrict__ q_out, T* __restrict__ k_cache,
    T* __restrict__ v_cache, const void* __restrict__ cos_table, const void* __restrict__ sin_table,
    const int* __restrict__ positions, const int* __restrict__ slots, long long max_pos,
    int q_heads, int kv_heads, int head_dim, int block_size, long long num_blocks, int kind) {
    const long long t = blockIdx.x;
    const long long pos = positions[t];
    const long long slot = slots[t];
    const long long blk = slot >= 0 ? slot / block_size : -1;
    const bool in_range = pos >= 0 && pos < max_pos;
    const bool store = blk >= 0 && blk < num_blocks;
    const long long off = slot - blk * block_size;
    const int half = head_dim / 2;
    const int heads = q_heads + 2 * kv_heads;
    const T* row = qkv + t * static_cast<long long>(heads) * head_dim;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < heads * half;
         i += gridDim.y * blockDim.x) {
        const int h = i / half;
        const int j = i - h * half;
        if (h >= q_heads && !store) break;  // heads ascend with i: the rest are k and v too
        const T* src = row + static_cast<long long>(h) * head_dim;
        if (h >= q_heads + kv_heads) {  // a value head: stored as it is
            T* dst = v_cache +
                     ((blk * kv_heads + (h - q_heads - kv_heads)) * block_size + off) * head_dim;
            dst[j] = src[j];
            dst[j + half] = src[j + half];
            continue;
        }
        T* dst = h < q_heads
                     ? q_out + (t * q_heads + h) * head_dim
                     : k_cache + ((blk * kv_heads + (h - q_heads)) * block_size + off) * head_dim;
        float c = 1.0f, s = 0.0f;
        if (in_range) {
            c = table_at(cos_table, pos * half + j, kind);
            s = table_at(sin_table, pos * half + j, kind);
        }
        const float2 rot = rope_pair(widen(src[j]), widen(src[j + half]), c, s);
        dst[j] = narrow<T>(rot.x);
        dst[j + half] = narrow<T>(rot.y);
    }
}

#define PGK_ROPE_KV_PAGED(sfx, T)                                                                 \
    PGK_KERNEL(rope_kv_paged_##sfx,                                                               \
               (const T* qkv, T* q_out, T* k_cache, T* v_cache, const void* cos_table,            \
                const void* sin_table, const int* positions, const int* slots, long long max_pos, \
                int q_heads, int kv_heads, int head_dim, int block_size, long long num_blocks,    \
                int kind)) {                                                                      \
        rope_kv_paged_token<T>(qkv, q_out, k_cache, v_cache, cos_table, sin_table, positions,     \
                               slots, max_pos, q_heads, kv_heads, head_dim, block_size,           \
                               num_blocks, kind);                                                 \
    }
PGK_FLOAT_TYPES(PGK_ROPE_KV_PAGED)
