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
// block_table[b, t / block_size]. The per-tile arithmetic (fp32 scores over 16-byte loads, block
// max, online softmax in base 2, value rows accumulated in row groups, summed through shared
// memory at the end) is decode_attention_single's. A length of 0 gives zeros.
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

namespace {

constexpr int kThreads = 256;
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Block-wide reduction of one float per thread (max or sum); every thread gets the result.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* slots) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = kMax ? fmaxf(v, o) : v + o;
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) slots[warp] = v;
    __syncthreads();
    float r = slots[0];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) r = kMax ? fmaxf(r, slots[w]) : r + slots[w];
    __syncthreads();  // the slots are reused by the next reduction
    return r;
}

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
    constexpr int kRowThreads = D / 8;               // threads of one value row, 8 dims each
    constexpr int kGroups = kThreads / kRowThreads;  // value rows accumulated at once
    constexpr int kSteps = kThreads / kGroups;       // value rows a thread takes per tile
    __shared__ float qs[D];
    __shared__ float probs[kThreads];
    __shared__ float slots[kThreads / 32];
    __shared__ float partial[kGroups][D];

    const int h = blockIdx.x, b = blockIdx.y;
    const int hk = h / (hq / hkv);
    const long long qrow = ((long long)b * hq + h) * D;
    const int* table = block_table + (long long)b * max_blocks;
    const int len = min(max(seq_lens[b], 0), max_blocks * block_size);
    // Scores in base 2: q pre-scaled by scale * log2(e).
    for (int d = threadIdx.x; d < D; d += kThreads) qs[d] = widen(q[qrow + d]) * scale * kLog2e;
    __syncthreads();

    const int g = threadIdx.x / kRowThreads, j = threadIdx.x % kRowThreads;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float run_max = neg_inf(), run_sum = 0.0f;
    for (int t0 = 0; t0 < len; t0 += kThreads) {
        const int t = t0 + threadIdx.x;
        float s = neg_inf();
        if (t < len) {
            const uint4* row = reinterpret_cast<const uint4*>(
                paged_row<T, D>(k_cache, table, hk, hkv, block_size, t));
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < D / 8; ++c) {
                const uint4 v = __ldg(row + c);
                const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
                for (int i = 0; i < 8; ++i) dot = fmaf(qs[c * 8 + i], widen(e[i]), dot);
            }
            s = dot;
        }
        const float tile_max = block_reduce<true>(s, slots);
        const float new_max = fmaxf(run_max, tile_max);
        const float p = t < len ? exp2f(s - new_max) : 0.0f;
        const float rescale = exp2f(run_max - new_max);  // 0 on the first tile
        run_sum = run_sum * rescale + block_reduce<false>(p, slots);
        run_max = new_max;
        probs[threadIdx.x] = p;
        __syncthreads();
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= rescale;
        // All of this tile's value loads are issued before they are used (independent 16-byte
        // loads; rows past the length are not read).
        const int rows = min(kThreads, len - t0);
        uint4 vv[kSteps];
#pragma unroll
        for (int i = 0; i < kSteps; ++i) {
            const int r = g + i * kGroups;
            if (r < rows)
                vv[i] = __ldg(reinterpret_cast<const uint4*>(
                                  paged_row<T, D>(v_cache, table, hk, hkv, block_size, t0 + r)) +
                              j);
        }
#pragma unroll
        for (int i = 0; i < kSteps; ++i) {
            const int r = g + i * kGroups;
            if (r < rows) {
                const float pr = probs[r];
                const T* e = reinterpret_cast<const T*>(&vv[i]);
#pragma unroll
                for (int k = 0; k < 8; ++k) acc[k] = fmaf(pr, widen(e[k]), acc[k]);
            }
        }
        __syncthreads();  // probs is rewritten by the next tile
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) partial[g][j * 8 + e] = acc[e];
    __syncthreads();
    if (threadIdx.x < D) {
        float o = 0.0f;
#pragma unroll 8
        for (int i = 0; i < kGroups; ++i) o += partial[i][threadIdx.x];
        const float inv = run_sum > 0.0f ? 1.0f / run_sum : 0.0f;
        out[qrow + threadIdx.x] = narrow<T>(o * inv);
    }
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
