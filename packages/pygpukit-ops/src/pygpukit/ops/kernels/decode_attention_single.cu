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
// probabilities in shared memory; then thread (g, j) accumulates dims 8j .. 8j + 7 of the value
// rows g, g + G, ... of the tile (G = 256 / (D / 8) row groups; a thread issues all its 16-byte
// loads of the tile before using them). The row groups are summed through shared memory at the
// end. A length of 0 gives zeros.
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

    const int g = threadIdx.x / kRowThreads, j = threadIdx.x % kRowThreads;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
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
                vv[i] = __ldg(reinterpret_cast<const uint4*>(vals + (long long)(t0 + r) * D) + j);
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
