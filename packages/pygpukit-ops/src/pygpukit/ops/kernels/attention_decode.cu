// Decode attention (one new query token per sequence) over a KV cache, flash-decoding style:
//   attn_decode_d<D>_<f16|bf16>: grid (splits, Hkv * ceil(G / 4), B), 128 threads. Each CTA
//     reads the keys [split * chunk, min((split + 1) * chunk, len)) of one KV head once and
//     scores them against up to kG = 4 of the G = Hq / Hkv query heads that share it (GQA).
//   attn_decode_combine_<f16|bf16>: grid (B * Hq), merges the per-split partial results by
//     their log-sum-exp. With one split the first kernel writes the output itself.
// Caches: contiguous [B, Hkv, cache_len, D] (block_table null), or paged
// [num_blocks, Hkv, cache_len = block_size, D] with block_table int32 [B, max_blocks]. seq_lens
// is read on the device; lengths are clamped to the cache capacity, length 0 gives zeros.
// Inside a CTA, a group of kLanes lanes owns one key row at a time (16 bytes a lane, one
// vector load), so a warp keeps 32 / kLanes rows in flight per step and kUnroll steps are
// loaded before any is used. Each group keeps its own running max / sum / output (base-2
// online softmax); the groups are merged through shared memory at the end.
#include "attention_common.cuh"

using namespace pgk_attn;

namespace {

constexpr int kThreads = 128;
constexpr int kG = 4;       // query heads per CTA
constexpr int kUnroll = 4;  // key rows per group per step
constexpr int kMaxSplits = 64;

template <int D>
struct DecodeConfig {
    static constexpr int kChunks = D / 8;  // 16-byte chunks per row
    static constexpr int kLanes = kChunks <= 8 ? 8 : (kChunks <= 16 ? 16 : 32);
    static constexpr int kGroups = kThreads / kLanes;  // rows in flight per step (per CTA)
};

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 p = Half2<T>::unpack(w[i]);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}

template <typename T, int D>
__device__ __forceinline__ void attn_decode(const T* __restrict__ q, const T* __restrict__ kc,
                                            const T* __restrict__ vc,
                                            const int* __restrict__ seq_lens,
                                            const int* __restrict__ block_table,
                                            T* __restrict__ out, float* __restrict__ o_part,
                                            float* __restrict__ lse, int hq, int hkv, int cache_len,
                                            int max_blocks, int capacity, int chunk, float scale) {
    using C = DecodeConfig<D>;
    constexpr int kLanes = C::kLanes, kGroups = C::kGroups;
    __shared__ float sm_m[kGroups][kG], sm_l[kGroups][kG];
    __shared__ __align__(16) float sm_acc[kGroups][kG][D];

    const int tid = threadIdx.x, grp = tid / kLanes, sub = tid % kLanes;
    const bool active = sub < C::kChunks;
    const int split = blockIdx.x, b = blockIdx.z;
    const int group = hq / hkv, n_hchunks = (group + kG - 1) / kG;
    const int hk = blockIdx.y / n_hchunks;
    const int h0 = hk * group + (blockIdx.y % n_hchunks) * kG;
    const int nh = min(kG, (hk + 1) * group - h0);
    const int len = min(seq_lens[b], capacity);
    const int t_begin = split * chunk, t_end = min(t_begin + chunk, len);
    if (gridDim.x > 1 && t_begin >= len) return;  // the combine kernel skips this split

    const float scale2 = scale * kLog2e;
    float qv[kG][8];
#pragma unroll
    for (int h = 0; h < kG; ++h) {
        if (active && h < nh) {
            const uint4 u =
                *reinterpret_cast<const uint4*>(q + ((size_t)b * hq + h0 + h) * D + sub * 8);
            unpack8<T>(u, qv[h]);
#pragma unroll
            for (int e = 0; e < 8; ++e) qv[h][e] *= scale2;
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) qv[h][e] = 0.f;
        }
    }
    float acc[kG][8], m[kG], l[kG];
#pragma unroll
    for (int h = 0; h < kG; ++h) {
        m[h] = PGK_NEG_INF;
        l[h] = 0.f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][e] = 0.f;
    }

    // The trip count is the same for every thread: the shuffles below need whole warps.
    for (int base = t_begin; base < t_end; base += kGroups * kUnroll) {
        uint4 kr[kUnroll], vr[kUnroll];
        bool valid[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int t = base + grp + u * kGroups;
            valid[u] = t < t_end;
            kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
            if (valid[u] && active) {
                size_t row;
                if (block_table != nullptr) {
                    const int blk = block_table[(size_t)b * max_blocks + t / cache_len];
                    row = ((size_t)blk * hkv + hk) * cache_len + t % cache_len;
                } else {
                    row = ((size_t)b * hkv + hk) * cache_len + t;
                }
                kr[u] = __ldg(reinterpret_cast<const uint4*>(kc + row * D + sub * 8));
                vr[u] = __ldg(reinterpret_cast<const uint4*>(vc + row * D + sub * 8));
            }
        }
        float s[kUnroll][kG];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            float kf[8];
            unpack8<T>(kr[u], kf);
#pragma unroll
            for (int h = 0; h < kG; ++h) {
                float d = 0.f;
#pragma unroll
                for (int e = 0; e < 8; ++e) d = fmaf(qv[h][e], kf[e], d);
#pragma unroll
                for (int off = kLanes / 2; off > 0; off /= 2)
                    d += __shfl_xor_sync(0xffffffffu, d, off);
                s[u][h] = valid[u] ? d : PGK_NEG_INF;
            }
        }
        float ref[kG];
#pragma unroll
        for (int h = 0; h < kG; ++h) {
            float mx = m[h];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, s[u][h]);
            // A group past the end has seen no key yet: subtract 0, not -inf (no NaN).
            ref[h] = mx == PGK_NEG_INF ? 0.f : mx;
            const float alpha = fast_exp2(m[h] - ref[h]);
            m[h] = mx;
            l[h] *= alpha;
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[h][e] *= alpha;
        }
        // Each V row is unpacked once and used by every head.
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            float vf[8];
            unpack8<T>(vr[u], vf);
#pragma unroll
            for (int h = 0; h < kG; ++h) {
                const float p = fast_exp2(s[u][h] - ref[h]);
                l[h] += p;
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[h][e] = fmaf(p, vf[e], acc[h][e]);
            }
        }
    }

    // Merge the groups of this CTA.
#pragma unroll
    for (int h = 0; h < kG; ++h) {
        if (sub == 0) {
            sm_m[grp][h] = m[h];
            sm_l[grp][h] = l[h];
        }
        if (active) {
#pragma unroll
            for (int e = 0; e < 8; ++e) sm_acc[grp][h][sub * 8 + e] = acc[h][e];
        }
    }
    __syncthreads();
    for (int i = tid; i < nh * D; i += kThreads) {
        const int h = i / D, d = i % D;
        float mx = PGK_NEG_INF;
        for (int g2 = 0; g2 < kGroups; ++g2) mx = fmaxf(mx, sm_m[g2][h]);
        float sum = 0.f, o = 0.f;
        if (mx != PGK_NEG_INF) {
            for (int g2 = 0; g2 < kGroups; ++g2) {
                const float w = fast_exp2(sm_m[g2][h] - mx);  // 0 for a group that saw no key
                sum += sm_l[g2][h] * w;
                o += sm_acc[g2][h][d] * w;
            }
        }
        const float val = sum > 0.f ? o / sum : 0.f;
        const size_t row = (size_t)b * hq + h0 + h;
        if (gridDim.x == 1) {
            out[row * D + d] = static_cast<T>(val);
        } else {
            o_part[(row * gridDim.x + split) * D + d] = val;
            if (d == 0) lse[row * gridDim.x + split] = sum > 0.f ? mx + __log2f(sum) : PGK_NEG_INF;
        }
    }
}

template <typename T>
__device__ __forceinline__ void attn_decode_combine(const float* __restrict__ o_part,
                                                    const float* __restrict__ lse,
                                                    const int* __restrict__ seq_lens,
                                                    T* __restrict__ out, int hq, int d_head,
                                                    int splits, int chunk, int capacity) {
    __shared__ float w[kMaxSplits];
    __shared__ float total;
    const int row = blockIdx.x, b = row / hq;
    const int len = min(seq_lens[b], capacity);
    const int n = min(splits, (len + chunk - 1) / chunk);  // splits that saw any key
    if (threadIdx.x == 0) {
        float mx = PGK_NEG_INF;
        for (int i = 0; i < n; ++i) mx = fmaxf(mx, lse[(size_t)row * splits + i]);
        float sum = 0.f;
        for (int i = 0; i < n; ++i) {
            w[i] = mx == PGK_NEG_INF ? 0.f : fast_exp2(lse[(size_t)row * splits + i] - mx);
            sum += w[i];
        }
        total = sum;
    }
    __syncthreads();
    const float inv = total > 0.f ? 1.f / total : 0.f;
    for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
        float o = 0.f;
        for (int i = 0; i < n; ++i) o += w[i] * o_part[((size_t)row * splits + i) * d_head + d];
        out[(size_t)row * d_head + d] = static_cast<T>(o * inv);
    }
}

}  // namespace

// Entry points, spelled out because callers find kernels by their declared names.
#define PGK_DECODE_CALL                                                                           \
    q, k_cache, v_cache, seq_lens, block_table, out, o_part, lse, hq, hkv, cache_len, max_blocks, \
        capacity, chunk, scale

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d64_f16(const __half* q, const __half* k_cache, const __half* v_cache,
                        const int* seq_lens, const int* block_table, __half* out, float* o_part,
                        float* lse, int hq, int hkv, int cache_len, int max_blocks, int capacity,
                        int chunk, float scale) {
    attn_decode<__half, 64>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d64_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                         const __nv_bfloat16* v_cache, const int* seq_lens, const int* block_table,
                         __nv_bfloat16* out, float* o_part, float* lse, int hq, int hkv,
                         int cache_len, int max_blocks, int capacity, int chunk, float scale) {
    attn_decode<__nv_bfloat16, 64>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d80_f16(const __half* q, const __half* k_cache, const __half* v_cache,
                        const int* seq_lens, const int* block_table, __half* out, float* o_part,
                        float* lse, int hq, int hkv, int cache_len, int max_blocks, int capacity,
                        int chunk, float scale) {
    attn_decode<__half, 80>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d80_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                         const __nv_bfloat16* v_cache, const int* seq_lens, const int* block_table,
                         __nv_bfloat16* out, float* o_part, float* lse, int hq, int hkv,
                         int cache_len, int max_blocks, int capacity, int chunk, float scale) {
    attn_decode<__nv_bfloat16, 80>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d96_f16(const __half* q, const __half* k_cache, const __half* v_cache,
                        const int* seq_lens, const int* block_table, __half* out, float* o_part,
                        float* lse, int hq, int hkv, int cache_len, int max_blocks, int capacity,
                        int chunk, float scale) {
    attn_decode<__half, 96>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d96_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                         const __nv_bfloat16* v_cache, const int* seq_lens, const int* block_table,
                         __nv_bfloat16* out, float* o_part, float* lse, int hq, int hkv,
                         int cache_len, int max_blocks, int capacity, int chunk, float scale) {
    attn_decode<__nv_bfloat16, 96>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d128_f16(const __half* q, const __half* k_cache, const __half* v_cache,
                         const int* seq_lens, const int* block_table, __half* out, float* o_part,
                         float* lse, int hq, int hkv, int cache_len, int max_blocks, int capacity,
                         int chunk, float scale) {
    attn_decode<__half, 128>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d128_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                          const __nv_bfloat16* v_cache, const int* seq_lens, const int* block_table,
                          __nv_bfloat16* out, float* o_part, float* lse, int hq, int hkv,
                          int cache_len, int max_blocks, int capacity, int chunk, float scale) {
    attn_decode<__nv_bfloat16, 128>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d256_f16(const __half* q, const __half* k_cache, const __half* v_cache,
                         const int* seq_lens, const int* block_table, __half* out, float* o_part,
                         float* lse, int hq, int hkv, int cache_len, int max_blocks, int capacity,
                         int chunk, float scale) {
    attn_decode<__half, 256>(PGK_DECODE_CALL);
}

extern "C" __global__ void __launch_bounds__(kThreads)
    attn_decode_d256_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                          const __nv_bfloat16* v_cache, const int* seq_lens, const int* block_table,
                          __nv_bfloat16* out, float* o_part, float* lse, int hq, int hkv,
                          int cache_len, int max_blocks, int capacity, int chunk, float scale) {
    attn_decode<__nv_bfloat16, 256>(PGK_DECODE_CALL);
}

extern "C" __global__ void attn_decode_combine_f16(const float* o_part, const float* lse,
                                                   const int* seq_lens, __half* out, int hq,
                                                   int d_head, int splits, int chunk,
                                                   int capacity) {
    attn_decode_combine<__half>(o_part, lse, seq_lens, out, hq, d_head, splits, chunk, capacity);
}

extern "C" __global__ void attn_decode_combine_bf16(const float* o_part, const float* lse,
                                                    const int* seq_lens, __nv_bfloat16* out, int hq,
                                                    int d_head, int splits, int chunk,
                                                    int capacity) {
    attn_decode_combine<__nv_bfloat16>(o_part, lse, seq_lens, out, hq, d_head, splits, chunk,
                                       capacity);
}
