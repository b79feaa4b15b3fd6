// Token sampling from logits [B, V] on the GPU: one 1024-thread block per row, no host round trip.
//
// Per row: v_i = penalized(logit_i) / temperature (repetition penalty as in Hugging Face: a logit
// of a token in prev_tokens is divided by the penalty when positive, multiplied when negative).
// Filters, in Hugging Face's order: top-k, then top-p on what top-k kept, then min-p. Each filter
// is a threshold on v, found without sorting:
//   top-k: a 4-pass radix select (8 bits a pass, 256-bin histogram in shared memory) over the
//          order-preserving 32-bit key of v finds the exact k-th largest value;
//   top-p: the same radix select weighted by probability mass finds the value at which the mass
//          of everything at or above it first reaches p of the total;
//   min-p: v >= max(v) + log(min_p).
// Ties at a threshold are all kept. Probability masses are exp(v - max v) in 32.32 fixed point
// (64-bit integers): sums are exact and order-independent, so a fixed seed reproduces bit for
// bit; a token whose probability is below 2^-32 of the top token's has mass 0 and is never drawn.
// The draw: one 64-bit uniform from Philox4x32-10 (counter = (offset, row), key = seed) scaled
// to [0, total mass), located with a block-wide exclusive scan over per-thread index ranges.
// Temperature <= 0 means greedy (argmax of the penalized logits, lowest index on ties).
// The logits are re-read from global memory (L2) by each pass; V up to a few 100K stays there.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "layers.cuh"
#include "pygpukit/kernel.cuh"

namespace {

constexpr int kThreads = 1024;
constexpr int kWarpsPerBlock = kThreads / 32;

__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

template <typename T>
__device__ __forceinline__ float load_logit(const T* p, int i) {
    return pgk_layers::widen(p[i]);
}

// Larger float <-> larger unsigned key (sign flip for positives, bit inversion for negatives).
__device__ __forceinline__ unsigned order_key(float v) {
    const unsigned u = __float_as_uint(v);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct RowView {
    const void* logits;
    const unsigned* mask;  // bit i set: token i is in prev_tokens (nullptr: no penalty)
    float penalty;
    float temperature;
};

// The logit after NaN clean-up and repetition penalty. Rounding-explicit intrinsics keep every
// pass computing bit-identical values (no contraction differences between call sites).
template <typename T>
__device__ __forceinline__ float penalized(const T* row, const unsigned* mask, float penalty,
                                           int i) {
    float l = load_logit<T>(row, i);
    if (isnan(l)) l = neg_inf();
    if (mask != nullptr && ((mask[i >> 5] >> (i & 31)) & 1u))
        l = l > 0.0f ? __fdiv_rn(l, penalty) : __fmul_rn(l, penalty);
    return l;
}

__device__ __forceinline__ unsigned long long fixed_mass(float v, float vmax) {
    // exp(v - vmax) in (0, 1], scaled to 32.32 fixed point (truncated).
    return (unsigned long long)__fmul_rn(expf(__fsub_rn(v, vmax)), 4294967296.0f);
}

// Block-wide argmax over (value, index): larger value wins, lower index on ties.
__device__ __forceinline__ void argmax_combine(float& bv, int& bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

__device__ __forceinline__ void block_argmax(float& bv, int& bi) {
    __shared__ float sv[kWarpsPerBlock];
    __shared__ int si[kWarpsPerBlock];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        argmax_combine(bv, bi, ov, oi);
    }
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    bv = sv[0], bi = si[0];
    for (int w = 1; w < kWarpsPerBlock; ++w) argmax_combine(bv, bi, sv[w], si[w]);
    __syncthreads();  // the buffers are reused by the next call
}

__device__ __forceinline__ unsigned long long block_sum_u64(unsigned long long v) {
    __shared__ unsigned long long s[kWarpsPerBlock];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) s[warp] = v;
    __syncthreads();
    unsigned long long total = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) total += s[w];
    __syncthreads();
    return total;
}

// Exclusive prefix sum over the block (thread order); *total receives the sum of all.
__device__ __forceinline__ unsigned long long block_exclusive_scan_u64(unsigned long long v,
                                                                       unsigned long long* total) {
    __shared__ unsigned long long s[kWarpsPerBlock];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    unsigned long long incl = v;
    for (int off = 1; off < 32; off <<= 1) {
        const unsigned long long o = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += o;
    }
    if (lane == 31) s[warp] = incl;
    __syncthreads();
    unsigned long long before = 0, all = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) {
        if (w < warp) before += s[w];
        all += s[w];
    }
    __syncthreads();
    *total = all;
    return before + incl - v;
}

// Philox4x32-10 (Salmon et al., SC'11): a counter-based generator, so any (seed, offset, row)
// gives its numbers directly. Mirrored bit for bit by pygpukit/ops/sampling.py's NumPy version.
__device__ __forceinline__ uint4 philox4x32_10(uint4 ctr, uint2 key) {
    constexpr unsigned kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    constexpr unsigned kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        const unsigned hi0 = __umulhi(kM0, ctr.x), lo0 = kM0 * ctr.x;
        const unsigned hi1 = __umulhi(kM1, ctr.z), lo1 = kM1 * ctr.z;
        ctr = make_uint4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
        key.x += kW0, key.y += kW1;
    }
    return ctr;
}

// Radix select over the keys of v_i (keys >= floor_key only): the largest key K such that the
// weight (count, or mass) of elements with key >= K reaches `need`. Weight = 1 when COUNT.
template <typename T, bool COUNT>
__device__ __forceinline__ unsigned radix_select(const T* row, const unsigned* mask, float penalty,
                                                 float temp, float vmax, int V, unsigned floor_key,
                                                 unsigned long long need) {
    __shared__ unsigned long long hist[256];
    __shared__ unsigned s_prefix;
    __shared__ unsigned long long s_need;
    unsigned prefix = 0, known = 0;  // decided high bits, and which bits are decided
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += kThreads) hist[b] = 0;
        __syncthreads();
        // Whole warps iterate together (uniform trip count) so the counting select can
        // aggregate per warp: most keys share a few top-digit bins, and one atomic per
        // distinct bin and warp replaces up to 32 contending ones.
        for (int base = 0; base < V; base += kThreads) {
            const int i = base + threadIdx.x;
            unsigned bin = 256u;  // no bin
            unsigned long long w = 0;
            if (i < V) {
                const float v = __fdiv_rn(penalized<T>(row, mask, penalty, i), temp);
                const unsigned key = order_key(v);
                if (key >= floor_key && (key & known) == prefix) {
                    w = COUNT ? 1ull : fixed_mass(v, vmax);
                    if (w) bin = (key >> shift) & 255u;
                }
            }
            if constexpr (COUNT) {
                const unsigned peers = __match_any_sync(0xffffffffu, bin);
                if (bin < 256u && (int)(threadIdx.x & 31) == __ffs(peers) - 1)
                    atomicAdd(&hist[bin], (unsigned long long)__popc(peers));
            } else if (bin < 256u) {
                atomicAdd(&hist[bin], w);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long above = 0;
            int sel = 0;
            for (int b = 255; b >= 0; --b) {
                if (above + hist[b] >= need) {
                    sel = b;
                    break;
                }
                above += hist[b];
            }
            s_prefix = prefix | ((unsigned)sel << shift);
            s_need = need - above;
        }
        __syncthreads();
        prefix = s_prefix, need = s_need;
        known |= 255u << shift;
    }
    return prefix;
}

template <typename T>
__device__ __forceinline__ void sample_row(const T* logits, int* out, int V, float temperature,
                                           const float* temps, int top_k, const int* top_ks,
                                           float top_p, const float* top_ps, float min_p,
                                           float penalty, const int* prev, int P,
                                           unsigned long long seed, unsigned long long offset) {
    extern __shared__ unsigned prev_mask[];
    const int b = blockIdx.x;
    const T* row = logits + (size_t)b * V;
    const float temp = temps != nullptr ? temps[b] : temperature;
    const int k = top_ks != nullptr ? top_ks[b] : top_k;
    const float p = top_ps != nullptr ? top_ps[b] : top_p;

    const unsigned* mask = nullptr;
    if (prev != nullptr && P > 0 && penalty != 1.0f) {
        const int words = (V + 31) >> 5;
        for (int w = threadIdx.x; w < words; w += kThreads) prev_mask[w] = 0u;
        __syncthreads();
        for (int j = threadIdx.x; j < P; j += kThreads) {
            const int t = prev[(size_t)b * P + j];
            if (t >= 0 && t < V) atomicOr(&prev_mask[t >> 5], 1u << (t & 31));
        }
        __syncthreads();
        mask = prev_mask;
    }

    // Pass 1: the largest penalized logit (dividing by temperature > 0 keeps the order).
    float best = neg_inf();
    int best_i = V;
    for (int i = threadIdx.x; i < V; i += kThreads)
        argmax_combine(best, best_i, penalized<T>(row, mask, penalty, i), i);
    block_argmax(best, best_i);
    const float vmax = __fdiv_rn(best, temp);
    // Greedy; or nothing finite to sample from; or a temperature so small that the scaled
    // logits overflow (the distribution is then a point mass on the argmax anyway).
    if (!(temp > 0.0f) || best == neg_inf() || isinf(vmax)) {
        if (threadIdx.x == 0) out[b] = best_i < V ? best_i : 0;
        return;
    }

    // Thresholds on the key of v: a token is kept when its key >= every threshold.
    unsigned keep_key = 0;
    if (k > 0 && k < V)
        keep_key = radix_select<T, true>(row, mask, penalty, temp, vmax, V, 0u, (unsigned)k);
    if (p < 1.0f) {
        unsigned long long z = 0;
        for (int i = threadIdx.x; i < V; i += kThreads) {
            const float v = __fdiv_rn(penalized<T>(row, mask, penalty, i), temp);
            if (order_key(v) >= keep_key) z += fixed_mass(v, vmax);
        }
        z = block_sum_u64(z);
        unsigned long long need = (unsigned long long)ceil((double)fmaxf(p, 0.0f) * (double)z);
        if (need == 0) need = 1;  // top_p = 0 keeps the top token
        const unsigned p_key =
            radix_select<T, false>(row, mask, penalty, temp, vmax, V, keep_key, need);
        keep_key = max(keep_key, p_key);
    }
    if (min_p > 0.0f) keep_key = max(keep_key, order_key(vmax + logf(min_p)));

    // Draw: each thread owns a contiguous index range; scan the kept mass over the ranges.
    const int chunk = (V + kThreads - 1) / kThreads;
    const int lo = min(V, (int)threadIdx.x * chunk), hi = min(V, lo + chunk);
    unsigned long long mine = 0;
    for (int i = lo; i < hi; ++i) {
        const float v = __fdiv_rn(penalized<T>(row, mask, penalty, i), temp);
        if (order_key(v) >= keep_key) mine += fixed_mass(v, vmax);
    }
    unsigned long long total = 0;
    const unsigned long long before = block_exclusive_scan_u64(mine, &total);
    const uint4 r =
        philox4x32_10(make_uint4((unsigned)offset, (unsigned)(offset >> 32), (unsigned)b, 0u),
                      make_uint2((unsigned)seed, (unsigned)(seed >> 32)));
    const unsigned long long u64 = ((unsigned long long)r.x << 32) | r.y;
    const unsigned long long target = __umul64hi(total, u64);  // uniform in [0, total)
    if (total == 0) {  // unreachable (the top token always has mass 2^32); stay defined
        if (threadIdx.x == 0) out[b] = best_i;
        return;
    }
    if (mine > 0 && before <= target && target < before + mine) {
        unsigned long long cum = before;
        int pick = -1, last = lo;
        for (int i = lo; i < hi; ++i) {
            const float v = __fdiv_rn(penalized<T>(row, mask, penalty, i), temp);
            if (order_key(v) < keep_key) continue;
            const unsigned long long m = fixed_mass(v, vmax);
            if (m == 0) continue;
            last = i;
            cum += m;
            if (cum > target) {
                pick = i;
                break;
            }
        }
        out[b] = pick >= 0 ? pick : last;
    }
}

template <typename T>
__device__ __forceinline__ void argmax_row(const T* logits, int* out, int V) {
    const T* row = logits + (size_t)blockIdx.x * V;
    float best = neg_inf();
    int best_i = V;
    for (int i = threadIdx.x; i < V; i += kThreads) {
        float l = load_logit<T>(row, i);
        if (isnan(l)) l = neg_inf();
        argmax_combine(best, best_i, l, i);
    }
    block_argmax(best, best_i);
    if (threadIdx.x == 0) out[blockIdx.x] = best_i < V ? best_i : 0;
}

}  // namespace

// Entry points, one per logits dtype; launch with grid = B, block = 1024, and for the sample
// kernels dynamic shared memory of ceil(V / 32) * 4 bytes when a repetition penalty is applied.
#define PGK_SAMPLING(sfx, T)                                                                   \
    PGK_KERNEL_BOUNDS(argmax_##sfx, (const T* logits, int* out, int V), kThreads, 1) {         \
        argmax_row<T>(logits, out, V);                                                         \
    }                                                                                          \
    PGK_KERNEL_BOUNDS(                                                                         \
        sample_##sfx,                                                                          \
        (const T* logits, int* out, int V, float temperature, const float* temps, int top_k,   \
         const int* top_ks, float top_p, const float* top_ps, float min_p, float penalty,      \
         const int* prev, int P, unsigned long long seed, unsigned long long offset),          \
        kThreads, 1) {                                                                         \
        sample_row<T>(logits, out, V, temperature, temps, top_k, top_ks, top_p, top_ps, min_p, \
                      penalty, prev, P, seed, offset);                                         \
    }
PGK_FLOAT_TYPES(PGK_SAMPLING)
