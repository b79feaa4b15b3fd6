// The batch-invariant paged twin of decode_attention_single.cu (host side:
// ops/decode_rows.py): one query token per sequence over a paged cache, with the
// arithmetic decode_attention_single performs over a contiguous one, so a sequence's output is
// bitwise the same whatever else is in the batch and equal to the single-sequence kernel's. The
// split kernel (ops.decode_attention) sizes its split count by the batch, which changes each
// sequence's rounding; here one CTA per (query head, sequence) walks its keys in tiles of 256 in
// order, as the contiguous kernel does.
//
//   attn_decode_paged_single_d<D>_<dtype>(q, k_cache, v_cache, seq_lens, block_table, out, hq,
//                                         hkv, block_size, max_blocks, scale)
//
// q [B, Hq, D], caches [blocks, Hkv, block_size, D], block_table int32 [B, max_blocks], out
// [B, Hq, D]; grid (Hq, B), 256 threads. Key t of sequence b is row t % block_size of block
// block_table[b, t / block_size]. The per-tile arithmetic is decode_single_tiles.cuh, the body
// decode_attention_single.cu runs too. A length of 0 gives zeros.
#include "decode_single_tiles.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_decode_single;

namespace {

constexpr int kThreads = kSingleThreads;

// Row t of a sequence's keys or values in the paged cache.
template <typename T, int D>
__device__ __forceinline__ const T* paged_row(const T* cache, const int* table, int hk, int hkv,
                                              int block_size, int t) {
    const long long blk = table[t / block_size];
    return cache + ((blk * hkv + hk) * block_size + t % block_size) * D;
}

template <typename T, int D>
__device__ __forceinline__ void decode_paged(const T* __restrict__ q, const T* __restrict__ k_cache,
                                             const T* __restrict__ v_cache,
                                             const int* __restrict__ seq_lens,
                                             const int* __restrict__ block_table,
                                             T* __restrict__ out, int hq, int hkv, int block_size,
                                             int max_blocks, float scale) {
    const int h = blockIdx.x, b = blockIdx.y;
    const int hk = h / (hq / hkv);
    const long long qrow = ((long long)b * hq + h) * D;
    const int* table = block_table + (long long)b * max_blocks;
    const int len = min(max(seq_lens[b], 0), max_blocks * block_size);
    decode_single_tiles<T, D>(
        q, out, qrow, len,
        [=](int t) { return paged_row<T, D>(k_cache, table, hk, hkv, block_size, t); },
        [=](int t) { return paged_row<T, D>(v_cache, table, hk, hkv, block_size, t); }, scale);
}

}  // namespace

#define PGK_DECODE_PAGED(D, sfx, T)                                                              \
    PGK_KERNEL_BOUNDS(attn_decode_paged_single_d##D##_##sfx,                                     \
                      (const T* q, const T* k_cache, const T* v_cache, const int* seq_lens,      \
                       const int* block_table, T* out, int hq, int hkv, int block_size,          \
                       int max_blocks, float scale),                                             \
                      kThreads) {                                                                \
        decode_paged<T, D>(q, k_cache, v_cache, seq_lens, block_table, out, hq, hkv, block_size, \
                           max_blocks, scale);                                                   \
    }
#define PGK_DECODE_PAGED_DIMS(sfx, T) PGK_DECODE_PAGED(64, sfx, T) PGK_DECODE_PAGED(128, sfx, T)
PGK_HALF_TYPES(PGK_DECODE_PAGED_DIMS)

PGK_CONSTANT(DECODE_PAGED_SINGLE_THREADS, kThreads);
