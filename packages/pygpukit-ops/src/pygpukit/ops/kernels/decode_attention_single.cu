// Single-pass decode attention for short caches (host side: ops/decode_attention_single.py):
// one launch, no split and no combine kernel. A batch-1 decode step of a small model is bound by
// its launches; over a few hundred cached tokens the split kernel plus its combine cost two
// launches where one CTA per query head has enough work.
//
//   attn_decode_single_d<D>_<dtype>(q, k_cache, v_cache, seq_lens, out, hq, hkv, cache_len, scale)
//
// q [B, Hq, D], caches [B, Hkv, cache_len, D] (contiguous), out [B, Hq, D]; grid (Hq, B), 256
// threads. The keys [0, min(seq_lens[b], cache_len)) are read in tiles of 256: thread i scores key
// t0 + i against the query (fp32 dot product over its row, 16-byte loads), the block takes the
// tile's max, rescales its running sum and outputs (online softmax, base 2) and stores the tile's
// probabilities in shared memory; then thread (g, j) accumulates dims 2j, 2j + 1 of the value
// rows g, g + G, ... of the tile (G = 256 / (D / 2) row groups, coalesced across a row). The row
// groups are summed through shared memory at the end. A length of 0 gives zeros.
//
// Launched with programmatic dependent launch: it prefetches the first tile's key and value rows
// into L2 and lets the next kernel (the o_proj GEMV, whose weight loads depend on nothing) launch,
// then waits for the q/k/v kernel before it.
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

namespace {

constexpr int kThreads = 256;
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

template <typename T>
__device__ __forceinline__ float2 pair_at(const T* p) {
    return make_float2(widen(p[0]), widen(p[1]));
}

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

template <typename T, int D>
__device__ __forceinline__ void decode_single(const T* __restrict__ q,
                                              const T* __restrict__ k_cache,
                                              const T* __restrict__ v_cache,
                                              const int* __restrict__ seq_lens, T* __restrict__ out,
                                              int hq, int hkv, int cache_len, float scale) {
    constexpr int kPairs = D / 2;               // dim pairs of a row
    constexpr int kGroups = kThreads / kPairs;  // value rows accumulated at once
    __shared__ float qs[D];
    __shared__ float probs[kThreads];
    __shared__ float slots[kThreads / 32];
    __shared__ float2 partial[kGroups][kPairs];

    const int h = blockIdx.x, b = blockIdx.y;
    const int hk = h / (hq / hkv);
    const long long qrow = ((long long)b * hq + h) * D;
    const T* keys = k_cache + ((long long)b * hkv + hk) * cache_len * D;
    const T* vals = v_cache + ((long long)b * hkv + hk) * cache_len * D;
    // Warm L2 with the first tile's rows while the kernel before this one drains: the cache's
    // first rows, whatever the length (which may not be final before the wait); the newest row may
    // still be being written, so every row is read after the wait.
    if (threadIdx.x < cache_len) {
#pragma unroll
        for (int off = 0; off < D * (int)sizeof(T); off += 128) {
            const char* kr = reinterpret_cast<const char*>(keys + (long long)threadIdx.x * D) + off;
            const char* vr = reinterpret_cast<const char*>(vals + (long long)threadIdx.x * D) + off;
            asm volatile("prefetch.global.L2 [%0];" ::"l"(kr));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(vr));
        }
    }
    allow_next_kernel();
    wait_for_previous_kernel();
    const int len = min(max(seq_lens[b], 0), cache_len);
    // Scores in base 2: q pre-scaled by scale * log2(e).
    for (int d = threadIdx.x; d < D; d += kThreads) qs[d] = widen(q[qrow + d]) * scale * kLog2e;
    __syncthreads();

    const int g = threadIdx.x / kPairs, j = threadIdx.x % kPairs;
    float2 acc = make_float2(0.0f, 0.0f);
    float run_max = neg_inf(), run_sum = 0.0f;
    for (int t0 = 0; t0 < len; t0 += kThreads) {
        const int t = t0 + threadIdx.x;
        float s = neg_inf();
        if (t < len) {
            const uint4* row = reinterpret_cast<const uint4*>(keys + (long long)t * D);
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
        acc.x *= rescale;
        acc.y *= rescale;
        const int rows = min(kThreads, len - t0);
        for (int r = g; r < rows; r += kGroups) {
            const float pr = probs[r];
            const float2 v = pair_at(vals + (long long)(t0 + r) * D + 2 * j);
            acc.x = fmaf(pr, v.x, acc.x);
            acc.y = fmaf(pr, v.y, acc.y);
        }
        __syncthreads();  // probs is rewritten by the next tile
    }
    partial[g][j] = acc;
    __syncthreads();
    if (threadIdx.x < kPairs) {
        float2 o = partial[0][j];
#pragma unroll
        for (int i = 1; i < kGroups; ++i) o.x += partial[i][j].x, o.y += partial[i][j].y;
        const float inv = run_sum > 0.0f ? 1.0f / run_sum : 0.0f;
        out[qrow + 2 * j] = narrow<T>(o.x * inv);
        out[qrow + 2 * j + 1] = narrow<T>(o.y * inv);
    }
}

}  // namespace

#define PGK_DECODE_SINGLE(D, sfx, T)                                                        \
    PGK_KERNEL_BOUNDS(attn_decode_single_d##D##_##sfx,                                      \
                      (const T* q, const T* k_cache, const T* v_cache, const int* seq_lens, \
                       T* out, int hq, int hkv, int cache_len, float scale),                \
                      kThreads) {                                                           \
        decode_single<T, D>(q, k_cache, v_cache, seq_lens, out, hq, hkv, cache_len, scale); \
    }
#define PGK_DECODE_SINGLE_DIMS(sfx, T) PGK_DECODE_SINGLE(64, sfx, T) PGK_DECODE_SINGLE(128, sfx, T)
PGK_HALF_TYPES(PGK_DECODE_SINGLE_DIMS)

PGK_CONSTANT(DECODE_SINGLE_THREADS, kThreads);
