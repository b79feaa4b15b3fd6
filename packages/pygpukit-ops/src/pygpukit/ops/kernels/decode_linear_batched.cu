// The batch-invariant twin of decode_linear.cu (host side: ops/decode_rows.py): the
// GEMVs of M decode tokens, each row computed with exactly the arithmetic decode_linear performs
// for that token alone, so a token's result does not depend on which other tokens share the
// batch (a cuBLASLt GEMM picks its tiling and split-K by M, which changes every row's rounding).
//
//   rms_norm_rows_<dtype>(x, w, eps, out, K)               grid M, 128 threads
//   decode_linear_rows_b<1|8>_<dtype>(x, w, bias, y, k_cache, v_cache, cos, sin, pos, slots,
//                              M, N, K, pair, mode, f32out, q_heads, kv_heads, head_dim,
//                              block_size, max_pos, table_kind)
//
// rms_norm_rows normalises each row as decode_linear's prologue does (a block of four warps per
// row, the same sum order), rounded to T: the batched GEMV then reads its input rows from memory,
// where decode_linear reads its one row from shared memory; the values are the same.
//
// decode_linear_rows: y[m] = x[m] @ w^T (+ bias) for m < M, w [N, K]. A warp owns decode_linear's
// four output rows (the same pairing for the paired epilogues) for kBatch token rows at once (one
// for a single token: decode_linear_rows_b1): each weight chunk it loads serves kBatch tokens. For
// every (token, output row) lane l accumulates the chunks l, l + 32, ... in ascending order with
// eight fmaf each, then the xor butterfly 16..1, then the bias; the epilogues round where
// decode_linear rounds. Grid (ceil(M / kBatch), row blocks): the blocks that read the same weight
// rows are consecutive, so the weights come from DRAM once and from L2 for the other token groups.
//
// Epilogues (mode), per token m:
//   kStore    y[m, row] = sum (+ bias), T, or float32 unrounded when f32out (logits);
//   kResidual y[m, row] = round(round(sum + bias) + y[m, row]) (the residual, in place);
//   kSwiGLU   y[m, p] = silu(gate) * up (y is [M, N / 2]);
//   kRopeKV   q heads rotated into y [M, q_heads * head_dim]; k rotated and v stored into the
//             paged caches [blocks, kv_heads, block_size, head_dim] at slots[m] (block *
//             block_size + offset; a negative slot stores nothing), RoPE angle of pos[m] (angle 0
//             outside [0, max_pos)).
#include "decode_row.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_decode_row;

namespace {

constexpr int kWarps = kNormWarps;  // warps per block
constexpr int kRows = 4;            // output rows per warp (decode_linear's)
constexpr int kBatch = 8;           // token rows per warp (a one-row kernel for M = 1)

enum Mode : int { kStore = 0, kResidual = 1, kSwiGLU = 2, kRopeKV = 3 };

template <typename T>
__device__ __forceinline__ void norm_rows(const T* __restrict__ x, const T* __restrict__ w,
                                          float eps, T* __restrict__ out, int K) {
    const long long row = blockIdx.x;
    norm_row<T>(x + row * K, w, eps, out + row * K, K);
}

// The value acc[r][m] for a lane-dependent (r, m), without dynamic register indexing.
template <int B>
__device__ __forceinline__ float pick(const float (&acc)[kRows][B], int r, int m) {
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int j = 0; j < B; ++j)
            if (i == r && j == m) v = acc[i][j];
    return v;
}

// B token rows per warp: kBatch, or 1 for a single token (no multiply-adds for absent rows).
template <typename T, int B>
__device__ __forceinline__ void linear_rows(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, void* y,
    T* __restrict__ k_cache, T* __restrict__ v_cache, const void* __restrict__ cos_table,
    const void* __restrict__ sin_table, const int* __restrict__ pos, const int* __restrict__ slots,
    int M, int N, int K, int pair, int mode, int f32out, int q_heads, int kv_heads, int head_dim,
    int block_size, long long max_pos, int table_kind) {
    const int lane = threadIdx.x & 31;
    const int warp = blockIdx.y * kWarps + (threadIdx.x >> 5);
    const int m0 = blockIdx.x * B;
    // This warp's output rows, as decode_linear assigns them.
    int rows[kRows];
    int p0 = 0;
    bool live;
    if (pair > 0) {
        p0 = warp * 2;
        live = p0 < N / 2;
        const int seg = p0 / pair;
        const int lo = seg * 2 * pair + (p0 - seg * pair);
        rows[0] = lo, rows[1] = lo + 1, rows[2] = lo + pair, rows[3] = lo + pair + 1;
    } else {
        live = warp * kRows < N;
#pragma unroll
        for (int r = 0; r < kRows; ++r) rows[r] = warp * kRows + r;
    }
    if (!live) return;  // no barrier below: a whole warp may leave
    const int chunks = K >> 3;
    const uint4* wrow[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)  // rows past N re-read the last row; their sums are dropped
        wrow[r] = reinterpret_cast<const uint4*>(w + (size_t)min(rows[r], N - 1) * K);
    const uint4* xrow[B];
#pragma unroll
    for (int m = 0; m < B; ++m)  // tokens past M re-read the last one; dropped likewise
        xrow[m] = reinterpret_cast<const uint4*>(x + (size_t)min(m0 + m, M - 1) * K);

    float acc[kRows][B];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < B; ++m) acc[r][m] = 0.0f;
    uint4 wv[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
        wv[r] = lane < chunks ? load_stream(wrow[r] + lane) : make_uint4(0, 0, 0, 0);
    for (int c = lane; c < chunks; c += 32) {
        uint4 nx[kRows];  // the next chunk's weights fly while this one's math runs
#pragma unroll
        for (int r = 0; r < kRows; ++r)
            nx[r] = c + 32 < chunks ? load_stream(wrow[r] + c + 32) : make_uint4(0, 0, 0, 0);
        float wf[kRows][8];
#pragma unroll
        for (int r = 0; r < kRows; ++r) unpack8<T>(wv[r], wf[r]);
#pragma unroll
        for (int m = 0; m < B; ++m) {
            float xf[8];
            unpack8<T>(__ldg(xrow[m] + c), xf);
#pragma unroll
            for (int r = 0; r < kRows; ++r)
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[r][m] = fmaf(xf[i], wf[r][i], acc[r][m]);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) wv[r] = nx[r];
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int m = 0; m < B; ++m) acc[r][m] = butterfly_sum(acc[r][m]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        if (bias != nullptr && rows[r] < N) {
            const float b = widen(bias[rows[r]]);
#pragma unroll
            for (int m = 0; m < B; ++m) acc[r][m] += b;
        }
    }

    if (mode == kStore || mode == kResidual) {
        // Lane (r, m) = (lane / B, lane % B) stores one output.
        const int r = lane / B, m = lane % B;
        if (r >= kRows) return;  // B < 8: fewer outputs than lanes
        int row = rows[0];
#pragma unroll
        for (int i = 1; i < kRows; ++i)
            if (r == i) row = rows[i];
        const int gm = m0 + m;
        if (row >= N || gm >= M) return;
        const float v = pick(acc, r, m);
        const long long at = (long long)gm * N + row;
        if (mode == kResidual) {
            T* out = static_cast<T*>(y);
            out[at] = narrow<T>(rounded<T>(v) + widen(out[at]));
        } else if (f32out) {
            static_cast<float*>(y)[at] = v;
        } else {
            static_cast<T*>(y)[at] = narrow<T>(v);
        }
        return;
    }
    // Paired epilogues: lane (t, m), t < 2, finishes pair p0 + t of token m from rows lo + t and
    // lo + S + t.
    if (lane >= 2 * B) return;
    const int t = lane / B, m = lane % B;
    const int gm = m0 + m;
    const int p = p0 + t;
    if (p >= N / 2 || gm >= M) return;
    const float x0 = rounded<T>(pick(acc, t, m));
    const float x1 = rounded<T>(pick(acc, 2 + t, m));
    if (mode == kSwiGLU) {
        static_cast<T*>(y)[(long long)gm * (N / 2) + p] = narrow<T>(x0 / (1.0f + expf(-x0)) * x1);
        return;
    }
    // kRopeKV: segment = head, j = the pair's index in the head.
    const int half = pair;
    const int h = p / half, j = p - h * half;
    const long long slot = slots[gm];
    if (h >= q_heads && slot < 0) return;  // no cache row for a negative slot
    const long long blk = slot / block_size, off = slot - blk * block_size;
    if (h >= q_heads + kv_heads) {  // v: stored as is
        const long long hv = h - q_heads - kv_heads;
        T* dst = v_cache + ((blk * kv_heads + hv) * block_size + off) * head_dim;
        dst[j] = narrow<T>(x0);
        dst[j + half] = narrow<T>(x1);
        return;
    }
    float rc = 1.0f, rs = 0.0f;  // angle 0 outside [0, max_pos), as rope_<dtype>
    const long long ps = pos[gm];
    if (ps >= 0 && ps < max_pos) {
        const long long at = ps * pair + j;
        rc = table_at(cos_table, at, table_kind);
        rs = table_at(sin_table, at, table_kind);
    }
    const float c = rc, s = rs;
    T* dst = h < q_heads
                 ? static_cast<T*>(y) + (long long)gm * q_heads * head_dim + (long long)h * head_dim
                 : k_cache + ((blk * kv_heads + (h - q_heads)) * block_size + off) * head_dim;
    dst[j] = narrow<T>(x0 * c - x1 * s);
    dst[j + half] = narrow<T>(x1 * c + x0 * s);
}

}  // namespace

#define PGK_NORM_ROWS(sfx, T)                                                                  \
    PGK_KERNEL_BOUNDS(rms_norm_rows_##sfx, (const T* x, const T* w, float eps, T* out, int K), \
                      kWarps * 32) {                                                           \
        norm_rows<T>(x, w, eps, out, K);                                                       \
    }
PGK_HALF_TYPES(PGK_NORM_ROWS)

#define PGK_DECODE_LINEAR_ROWS_B(B, sfx, T)                                                        \
    PGK_KERNEL_BOUNDS(                                                                             \
        decode_linear_rows_b##B##_##sfx,                                                           \
        (const T* x, const T* w, const T* bias, void* y, T* k_cache, T* v_cache,                   \
         const void* cos_table, const void* sin_table, const int* pos, const int* slots, int M,    \
         int N, int K, int pair, int mode, int f32out, int q_heads, int kv_heads, int head_dim,    \
         int block_size, long long max_pos, int table_kind),                                       \
        kWarps * 32) {                                                                             \
        linear_rows<T, B>(x, w, bias, y, k_cache, v_cache, cos_table, sin_table, pos, slots, M, N, \
                          K, pair, mode, f32out, q_heads, kv_heads, head_dim, block_size, max_pos, \
                          table_kind);                                                             \
    }
#define PGK_DECODE_LINEAR_ROWS(sfx, T) \
    PGK_DECODE_LINEAR_ROWS_B(1, sfx, T) PGK_DECODE_LINEAR_ROWS_B(8, sfx, T)
PGK_HALF_TYPES(PGK_DECODE_LINEAR_ROWS)

// Launch geometry the host side plans with.
PGK_CONSTANT(DECODE_ROWS_WARPS, kWarps);
PGK_CONSTANT(DECODE_ROWS_PER_WARP, kRows);
PGK_CONSTANT(DECODE_ROWS_BATCH, kBatch);
