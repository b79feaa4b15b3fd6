// The body shared by the one-CTA-per-query-head decode kernels (decode_attention_single.cu over
// a contiguous cache, decode_attention_paged_single.cu over a paged one): the same arithmetic in
// the same order, so both give bitwise the same output for the same keys and values. Only where
// a sequence's key and value rows live differs: the caller passes row accessors.
//
// One CTA of kSingleThreads threads per (query head, sequence). The keys [0, len) are read in
// tiles of kSingleThreads: thread i scores key t0 + i against the query (fp32 dot product over
// its row, 16-byte loads), the block takes the tile's max, rescales its running sum and outputs
// (online softmax, base 2) and stores the tile's probabilities in shared memory; then thread
// (g, j) accumulates dims 8j .. 8j + 7 of the value rows g, g + G, ... of the tile
// (G = kSingleThreads / (D / 8) row groups; a thread issues all its 16-byte loads of the tile
// before using them). The row groups are summed through shared memory at the end. A length of 0
// gives zeros.
#pragma once

#include "layers.cuh"

namespace pgk_decode_single {

using pgk_layers::narrow;
using pgk_layers::widen;

constexpr int kSingleThreads = 256;
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
    for (int w = 1; w < kSingleThreads / 32; ++w) r = kMax ? fmaxf(r, slots[w]) : r + slots[w];
    __syncthreads();  // the slots are reused by the next reduction
    return r;
}

// Attention of the query row q[qrow, qrow + D) over the rows [0, len) that key_row(t) and
// value_row(t) point at (D elements each); writes out[qrow, qrow + D). Every thread of the CTA
// calls it.
template <typename T, int D, typename KeyRow, typename ValueRow>
__device__ __forceinline__ void decode_single_tiles(const T* __restrict__ q, T* __restrict__ out,
                                                    long long qrow, int len, KeyRow key_row,
                                                    ValueRow value_row, float scale) {
    constexpr int kThreads = kSingleThreads;
    constexpr int kRowThreads = D / 8;               // threads of one value row, 8 dims each
    constexpr int kGroups = kThreads / kRowThreads;  // value rows accumulated at once
    constexpr int kSteps = kThreads / kGroups;       // value rows a thread takes per tile
    __shared__ float qs[D];
    __shared__ float probs[kThreads];
    __shared__ float slots[kThreads / 32];
    __shared__ float partial[kGroups][D];

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
            const uint4* row = reinterpret_cast<const uint4*>(key_row(t));
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
            if (r < rows) vv[i] = __ldg(reinterpret_cast<const uint4*>(value_row(t0 + r)) + j);
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

}  // namespace pgk_decode_single
