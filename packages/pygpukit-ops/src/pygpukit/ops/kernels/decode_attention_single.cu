// Single-pass decode attention for short caches (host side: ops/decode_attention_single.py):
// one launch, no split and no combine kernel. A batch-1 decode step of a small model is bound by
// its launches; over a few hundred cached tokens the split kernel plus its combine cost two
// launches where one CTA per query head has enough work.
//
//   attn_decode_single_d<D>_<dtype>(q, k_cache, v_cache, seq_lens, out, hq, hkv, cache_len, scale)
//
// q [B, Hq, D], caches [B, Hkv, cache_len, D] (contiguous), out [B, Hq, D]; grid (Hq, B), 256
// threads. The keys [0, min(seq_lens[b], cache_len)) are read in tiles of 256 by
// decode_single_tiles.cuh (shared with the paged twin, decode_attention_paged_single.cu). A length
// of 0 gives zeros.
//
// Launched with programmatic dependent launch: it prefetches the first tile's key and value rows
// into L2 and lets the next kernel (the o_proj GEMV, whose weight loads depend on nothing) launch,
// then waits for the q/k/v kernel before it.
#include "decode_single_tiles.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_decode_single;

namespace {

constexpr int kThreads = kSingleThreads;

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

template <typename T, int D>
__device__ __forceinline__ void decode_single(const T* __restrict__ q,
                                              const T* __restrict__ k_cache,
                                              const T* __restrict__ v_cache,
                                              const int* __restrict__ seq_lens, T* __restrict__ out,
                                              int hq, int hkv, int cache_len, float scale) {
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
    decode_single_tiles<T, D>(
        q, out, qrow, len, [keys](int t) { return keys + (long long)t * D; },
        [vals](int t) { return vals + (long long)t * D; }, scale);
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
