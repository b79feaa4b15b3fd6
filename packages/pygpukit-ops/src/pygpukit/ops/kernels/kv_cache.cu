// KV cache writes. The data are moved as 16-byte chunks whatever the dtype (the host checks
// that a row of D elements is a whole number of chunks), so one kernel serves every dtype.
//   kv_append_<i32|i64>: k/v [B, Hkv, T, D] -> cache [B, Hkv, max_len, D] at position
//     positions[b] + t (per_token = 0, positions [B]) or positions[b, t] (per_token = 1).
//   kv_paged_write_<i32|i64>: k/v [N, Hkv, D] -> cache [num_blocks, Hkv, block_size, D] at
//     slot_mapping[n] = block * block_size + offset; a negative slot is skipped (padding
//     tokens, as in vLLM).
// Positions or slots outside the cache are skipped too: a kernel cannot raise, and writing
// there would corrupt other memory.
#include "pygpukit/kernel.cuh"

namespace {

template <typename I>
__device__ __forceinline__ void kv_append(const uint4* __restrict__ k, const uint4* __restrict__ v,
                                          uint4* __restrict__ kc, uint4* __restrict__ vc,
                                          const I* __restrict__ positions, int per_token, int hkv,
                                          int n_new, int max_len, int row_chunks, long long total) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / row_chunks;  // (b, h, t) flattened
        const int c = static_cast<int>(i % row_chunks);
        const int t = static_cast<int>(row % n_new);
        const long long bh = row / n_new;
        const long long b = bh / hkv;
        const long long pos = per_token ? static_cast<long long>(positions[b * n_new + t])
                                        : static_cast<long long>(positions[b]) + t;
        if (pos < 0 || pos >= max_len) continue;
        const long long dst = (bh * max_len + pos) * row_chunks + c;
        kc[dst] = k[i];
        vc[dst] = v[i];
    }
}

template <typename I>
__device__ __forceinline__ void kv_paged_write(const uint4* __restrict__ k,
                                               const uint4* __restrict__ v, uint4* __restrict__ kc,
                                               uint4* __restrict__ vc, const I* __restrict__ slots,
                                               int hkv, int block_size, long long num_blocks,
                                               int row_chunks, long long total) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / row_chunks;  // (n, h) flattened
        const int c = static_cast<int>(i % row_chunks);
        const int h = static_cast<int>(row % hkv);
        const long long slot = static_cast<long long>(slots[row / hkv]);
        if (slot < 0) continue;
        const long long blk = slot / block_size, off = slot % block_size;
        if (blk >= num_blocks) continue;
        const long long dst = ((blk * hkv + h) * block_size + off) * row_chunks + c;
        kc[dst] = k[i];
        vc[dst] = v[i];
    }
}

}  // namespace

// Entry points per position/slot index type: kv_append_<i32|i64>, kv_paged_write_<i32|i64>.
#define PGK_KV_CACHE(sfx, I)                                                                     \
    PGK_KERNEL(kv_append_##sfx, (const uint4* k, const uint4* v, uint4* k_cache, uint4* v_cache, \
                                 const I* positions, int per_token, int hkv, int n_new,          \
                                 int max_len, int row_chunks, long long total)) {                \
        kv_append<I>(k, v, k_cache, v_cache, positions, per_token, hkv, n_new, max_len,          \
                     row_chunks, total);                                                         \
    }                                                                                            \
    PGK_KERNEL(                                                                                  \
        kv_paged_write_##sfx,                                                                    \
        (const uint4* k, const uint4* v, uint4* k_cache, uint4* v_cache, const I* slot_mapping,  \
         int hkv, int block_size, long long num_blocks, int row_chunks, long long total)) {      \
        kv_paged_write<I>(k, v, k_cache, v_cache, slot_mapping, hkv, block_size, num_blocks,     \
                          row_chunks, total);                                                    \
    }
PGK_KV_CACHE(i32, int)
PGK_KV_CACHE(i64, long long)
