// The GEMVs of a batch-1 decode layer with their neighbours fused in (host side:
// ops/decode_linear.py). One token's layer is launch-bound, not byte-bound: SmolLM2-135M reads 7 MB
// of weights a layer, a few microseconds of DRAM time, while the unfused layer runs eleven
// kernels of two to five microseconds each. Here a layer is four GEMVs and the attention:
//
//   [RMSNorm -> q/k/v GEMV (+ bias) -> RoPE, k/v into the cache]  (epilogue kRopeKV)
//   [o_proj GEMV -> + residual, written back into the residual]   (epilogue kResidual)
//   [RMSNorm -> gate/up GEMV -> silu(gate) * up]                   (epilogue kSwiGLU)
//   [down GEMV -> + residual]                                      (epilogue kResidual)
//
// and the step's head: [RMSNorm -> head GEMV -> argmax -> the step's bookkeeping]
// (decode_head_argmax), so a greedy step needs no float32 logits and no kernel after the head.
//
//   decode_linear_<dtype>(x, norm_w, eps, w, bias, y, k_cache, v_cache, cos, sin, pos, N, K,
//                         pair, mode, f32out, q_heads, kv_heads, head_dim, capacity, max_pos,
//                         table_kind, gather, vocab, gather_out)
//
// y = x @ w^T (+ bias), x one row of K, w [N, K] (nn.Linear layout), fp32 sums.
// Gather (gather != null): x is an embedding table [vocab, K] and the row is x[gather[0]], which
// block 0 also stores into gather_out: the step's embedding lookup, in the first GEMV.
// Prologue (norm_w != null): x is the residual stream and is RMS-normalised first, every block
// recomputing the row's sum of squares (the row is a few KB and L2-resident: cheaper than a
// launch); the normalised row is rounded to T, as the norm kernel stores it, and kept in shared
// memory for the block's warps.
// Rows: a warp owns R output rows (4; the _r2 and _r1 entry points 2 and 1, with more chunks in
// flight: more warps for a GEMV of few rows). Without pairing they are consecutive. With
// pairing (`pair` = S > 0) the output is segments of 2S rows whose row j and j + S meet in the
// epilogue (RoPE's NeoX halves of a head, S = head_dim / 2; gate and up, S = intermediate size):
// a warp owns pair indices p .. p + R/2 - 1 of one segment, rows (lo, lo + 1, lo + S, lo + S + 1)
// for R = 4, so the partners are in its registers after the warp reduction, with no shared
// memory or second kernel. A row's sum is the same whatever R (warp_row_sums).
// Epilogues (each value first rounded to T as the unfused GEMV stores it, then widened, so the
// results are those of the unfused kernels):
//   kStore    y[row] = sum + bias, T, or float32 unrounded when f32out (logits);
//   kResidual y[row] = round(round(sum + bias) + y[row]): y is the residual, updated in place;
//   kSwiGLU   y[p] = silu(gate) * up (y has N / 2 entries);
//   kRopeKV   heads 0..q_heads-1 rotated into y ([q_heads, head_dim]), the next kv_heads rotated
//             into k_cache [kv_heads, capacity, head_dim] and the last kv_heads into v_cache, at
//             slot pos % capacity; cos/sin [max_pos, head_dim / 2] (table_kind 0 fp32, 1 fp16,
//             2 bf16); a position outside [0, max_pos) rotates by angle 0, as rope_<dtype>.
//
// Programmatic dependent launch: the weights never depend on the previous kernel, so a block
// issues its first weight loads, then waits (griddepcontrol.wait) for the kernel before it, and
// only then reads x or touches y or the cache. It also lets the next kernel launch at once
// (griddepcontrol.launch_dependents), whose blocks then do the same. Launched without the
// attribute both instructions are no-ops.
#include "decode_row.cuh"
#include "linear_epilogue.cuh"
#include "pygpukit/kernel.cuh"

using namespace pygpukit_linear;
// The per-row pieces shared with the batched twin (decode_row.cuh): one definition each.
using pgk_decode_row::norm_row;
using pgk_decode_row::rope_pair;
using pgk_decode_row::rounded;
using pgk_decode_row::table_at;

namespace {

constexpr int kWarps = pgk_decode_row::kNormWarps;  // warps per block (the norm prologue's)
constexpr int kShortChunks = 4;  // decode_linear_short: rows of up to 32 * 4 chunks (K <= 1024)

enum Mode : int { kStore = 0, kResidual = 1, kSwiGLU = 2, kRopeKV = 3 };

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

// The first U chunks of each of a warp's R weight rows (lane l: chunks l, l + 32, ...): loads
// that depend on nothing the previous kernel writes, issued before waiting for it.
template <int R, int U>
__device__ __forceinline__ void first_weight_loads(const uint4* const (&wrow)[R], int chunks,
                                                   int lane, bool live, uint4 (&wv)[U][R]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int c = lane + 32 * u;
#pragma unroll
        for (int r = 0; r < R; ++r)
            wv[u][r] = live && c < chunks ? load_stream_now(wrow[r] + c) : make_uint4(0, 0, 0, 0);
    }
}

// A GEMV's start under programmatic dependent launch: the first weight loads (they do not depend
// on the previous kernel) issued before waiting for it, and the next kernel let launch.
template <int R, int U>
__device__ __forceinline__ void begin_after_previous(const uint4* const (&wrow)[R], int chunks,
                                                     int lane, bool live, uint4 (&wv)[U][R]) {
    first_weight_loads<R, U>(wrow, chunks, lane, live, wv);
    allow_next_kernel();
    wait_for_previous_kernel();
}

// The row the GEMV reads: x, or (norm_w != null) x (null: zeros) RMS-normalised into the block's
// shared memory `staged` (a block-wide step: every warp of the block must call it).
template <typename T>
__device__ __forceinline__ const uint4* input_row(const T* x, const T* __restrict__ norm_w,
                                                  float eps, unsigned char* staged, int K) {
    if (norm_w == nullptr) return reinterpret_cast<const uint4*>(x);
    norm_row<T, true>(x, norm_w, eps, reinterpret_cast<T*>(staged), K);
    return reinterpret_cast<const uint4*>(staged);
}

// The per-row arithmetic every decode GEMV shares (and that a batched twin must reproduce bit
// for bit): lane l takes chunks l, l + 32, l + 64, ... of a row in that order, 8 fmaf per chunk
// in element order into one fp32 sum per row, then an xor-shuffle butterfly (16, 8, 4, 2, 1), so
// every lane ends with all R sums. R and U only say how many rows and chunks are in flight; a
// row's sum is the same for every (R, U). wv holds the first U chunks (first_weight_loads).
// kOnePass: the rows have at most 32 U chunks, all of them already in wv (no loop, and no
// registers for a next batch of loads).
template <typename T, int R, int U, bool kOnePass = false>
__device__ __forceinline__ void warp_row_sums(const uint4* const (&wrow)[R],
                                              const uint4* __restrict__ xv, int chunks, int lane,
                                              uint4 (&wv)[U][R], float (&acc)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    if constexpr (kOnePass) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = lane + 32 * u;
            if (c < chunks) {
                float xf[8];
                unpack8<T>(xv[c], xf);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float wf[8];
                    unpack8<T>(wv[u][r], wf);
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[r] = fmaf(xf[i], wf[i], acc[r]);
                }
            }
        }
    }
    for (int c0 = lane; !kOnePass && c0 < chunks; c0 += 32 * U) {
        // Next iteration's loads first, so they fly while this one's math runs.
        uint4 nx[U][R];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = c0 + 32 * U + 32 * u;
#pragma unroll
            for (int r = 0; r < R; ++r)
                nx[u][r] = c < chunks ? load_stream_now(wrow[r] + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int c = c0 + 32 * u;
            if (c < chunks) {
                float xf[8];
                unpack8<T>(xv[c], xf);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    float wf[8];
                    unpack8<T>(wv[u][r], wf);
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[r] = fmaf(xf[i], wf[i], acc[r]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int r = 0; r < R; ++r) wv[u][r] = nx[u][r];
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
}

// The x row the GEMV reads: x itself, or (gather != null: x is an embedding table [V, K]) row
// gather[0] of it, which block 0 also stores into gather_out (the residual stream the layer
// adds to). An id outside [0, V) is a row of zeros (null here), as ops.embedding on the GPU.
template <typename T>
__device__ __forceinline__ const T* gathered_row(const T* __restrict__ x, const int* gather,
                                                 int vocab, T* gather_out, int K) {
    if (gather == nullptr) return x;
    const int id = gather[0];
    const T* row = id >= 0 && id < vocab ? x + (size_t)id * K : nullptr;
    if (blockIdx.x == 0) {
        const uint4 zero = make_uint4(0, 0, 0, 0);
        const uint4* src = reinterpret_cast<const uint4*>(row);
        uint4* dst = reinterpret_cast<uint4*>(gather_out);
        for (int c = threadIdx.x; c < (K >> 3); c += blockDim.x) dst[c] = row ? src[c] : zero;
    }
    return row;
}

// R rows per warp, U chunks per row in flight per lane (kOnePass: K <= 256 U, the whole rows).
// Paired epilogues need an even R: the warp owns pairs p0 .. p0 + R/2 - 1 of one segment, rows
// lo + q and lo + S + q (q < R / 2).
template <typename T, int R, int U, bool kOnePass = false>
__device__ __forceinline__ void decode_linear(
    const T* __restrict__ x, const T* __restrict__ norm_w, float eps, const T* __restrict__ w,
    const T* __restrict__ bias, void* y, T* __restrict__ k_cache, T* __restrict__ v_cache,
    const void* __restrict__ cos_table, const void* __restrict__ sin_table,
    const int* __restrict__ pos, int N, int K, int pair, int mode, int f32out, int q_heads,
    int kv_heads, int head_dim, int capacity, long long max_pos, int table_kind,
    const int* __restrict__ gather, int vocab, T* __restrict__ gather_out) {
    constexpr int kPairs = R / 2;  // pairs a warp finishes (paired epilogues)
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int lane = threadIdx.x & 31;
    const int warp = blockIdx.x * kWarps + (threadIdx.x >> 5);
    // This warp's rows: consecutive, or pairs (lo + q, lo + S + q).
    int rows[R];
    int p0 = 0;
    bool live;
    if (pair > 0) {
        p0 = warp * kPairs;  // pair index; S % kPairs == 0, so a warp's pairs share a segment
        live = kPairs > 0 && p0 < N / 2;
        const int seg = p0 / pair;
        const int lo = seg * 2 * pair + (p0 - seg * pair);
#pragma unroll
        for (int q = 0; q < kPairs; ++q) rows[q] = lo + q, rows[kPairs + q] = lo + pair + q;
        if constexpr (R % 2) rows[R - 1] = lo;  // unused: odd R takes no pairs
    } else {
        live = warp * R < N;
#pragma unroll
        for (int r = 0; r < R; ++r) rows[r] = warp * R + r;
    }
    const int chunks = K >> 3;
    const uint4* wrow[R];
#pragma unroll
    for (int r = 0; r < R; ++r)  // rows past N re-read the last row; their sums are dropped
        wrow[r] = reinterpret_cast<const uint4*>(w + (size_t)min(rows[r], N - 1) * K);

    uint4 wv[U][R];
    begin_after_previous<R, U>(wrow, chunks, lane, live, wv);
    const uint4* xv =
        input_row<T>(gathered_row<T>(x, gather, vocab, gather_out, K), norm_w, eps, smem_raw, K);
    if (!live) return;  // after the block-wide prologue: every warp took part in its barriers

    // The epilogue's other inputs, loaded now so that their latency hides under the weight
    // stream: lane r < R the residual of its row (kResidual); lane t < R / 2 the position and
    // its pair's cos/sin (kRopeKV).
    int my_row = rows[0];
#pragma unroll
    for (int r = 1; r < R; ++r)
        if (lane == r) my_row = rows[r];
    float res_in = 0.0f;
    if (mode == kResidual && lane < R && my_row < N)
        res_in = widen(static_cast<const T*>(y)[my_row]);
    long long ps = 0;
    float rc = 1.0f, rs = 0.0f;
    if (mode == kRopeKV && lane < kPairs) {
        ps = pos[0];
        const int pp = p0 + lane, hh = pp / pair;
        if (ps >= 0 && ps < max_pos && hh < q_heads + kv_heads && pp < N / 2) {
            const long long at = ps * pair + (pp - hh * pair);
            rc = table_at(cos_table, at, table_kind);
            rs = table_at(sin_table, at, table_kind);
        }
    }

    float acc[R];
    warp_row_sums<T, R, U, kOnePass>(wrow, xv, chunks, lane, wv, acc);
    // Every lane now holds the R sums.
#pragma unroll
    for (int r = 0; r < R; ++r)
        if (bias != nullptr && rows[r] < N) acc[r] += widen(bias[rows[r]]);

    if (mode == kStore || mode == kResidual) {
        if (lane >= R) return;
        float v = acc[0];
#pragma unroll
        for (int r = 1; r < R; ++r)
            if (lane == r) v = acc[r];
        const int row = my_row;
        if (row >= N) return;
        if (mode == kResidual) {
            static_cast<T*>(y)[row] = narrow<T>(rounded<T>(v) + res_in);
        } else if (f32out) {
            static_cast<float*>(y)[row] = v;
        } else {
            static_cast<T*>(y)[row] = narrow<T>(v);
        }
        return;
    }
    if constexpr (kPairs > 0) {
        // Paired epilogues: lane t < R / 2 finishes pair p0 + t from rows lo + t, lo + S + t.
        if (lane >= kPairs) return;
        const int p = p0 + lane;
        if (p >= N / 2) return;
        float a0 = acc[0], a1 = acc[kPairs];
#pragma unroll
        for (int q = 1; q < kPairs; ++q)
            if (lane == q) a0 = acc[q], a1 = acc[kPairs + q];
        const float x0 = rounded<T>(a0);
        const float x1 = rounded<T>(a1);
        if (mode == kSwiGLU) {
            static_cast<T*>(y)[p] = narrow<T>(x0 / (1.0f + expf(-x0)) * x1);
            return;
        }
        // kRopeKV: segment = head, j = the pair's index in the head.
        const int half = pair;
        const int h = p / half, j = p - h * half;
        const long long slot = ps % capacity;
        if (h >= q_heads && slot < 0) return;  // no cache row for a negative position
        if (h >= q_heads + kv_heads) {         // v: stored as is
            T* dst = v_cache + ((long long)(h - q_heads - kv_heads) * capacity + slot) * head_dim;
            dst[j] = narrow<T>(x0);
            dst[j + half] = narrow<T>(x1);
            return;
        }
        const float c = rc, s = rs;  // angle 0 outside [0, max_pos), as rope_<dtype>
        T* dst = h < q_heads ? static_cast<T*>(y) + (long long)h * head_dim
                             : k_cache + ((long long)(h - q_heads) * capacity + slot) * head_dim;
        const float2 rot = rope_pair(x0, x1, c, s);  // decode_rows' rounding
        dst[j] = narrow<T>(rot.x);
        dst[j + half] = narrow<T>(rot.y);
    }
}

// The step's bookkeeping (one thread): the sampled token t becomes the current one at position
// pos + 1, is recorded in history (when it fits), and the next step's cache length
// min(pos + 2, capacity) is set. The cache slot is derived from the position where it is used.
__device__ __forceinline__ void advance_state(int t, int* token, int* pos, int* lens, int* history,
                                              int max_len, int capacity) {
    const int p = pos[0] + 1;
    pos[0] = p;
    token[0] = t;
    if (p >= 0 && p < max_len) history[p] = t;
    lens[0] = min(p + 1, capacity);
}

// A (logit, row) pair as one integer whose unsigned order is argmax_f32's: a larger logit wins,
// the lower row on ties, NaN counts as -inf, -0 ties +0. 0 is below every pair.
__device__ __forceinline__ unsigned long long argmax_key(float v, int row) {
    if (isnan(v)) v = __uint_as_float(0xff800000u);
    if (v == 0.0f) v = 0.0f;
    const unsigned u = __float_as_uint(v);
    const unsigned key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)key << 32) | (unsigned long long)(~(unsigned)row);
}

// The head GEMV with argmax (and the step's bookkeeping) as its epilogue: the float32 logits
// need not exist, and no argmax or bookkeeping kernel runs after it. Each warp walks row groups
// g, g + (warps in the grid), ... with decode_linear's per-row arithmetic (so the logits are
// gemv_f32out's, bit for bit), keeping its best (logit, row) key; a block's best goes into
// *best with one atomicMax; the last block to finish (a ticket from *done) reads the winner,
// writes next_token, advances the state when token != null, and zeroes *best and *done for the
// next launch. logits != null: the float32 logits are stored too.
template <typename T, int R, int U>
__device__ __forceinline__ void decode_head_argmax(
    const T* __restrict__ x, const T* __restrict__ norm_w, float eps, const T* __restrict__ w,
    int N, int K, float* __restrict__ logits, unsigned long long* best, unsigned* done,
    int* next_token, int* token, int* pos, int* lens, int* history, int max_len, int capacity) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ unsigned long long block_best[kWarps];
    const int lane = threadIdx.x & 31;
    const int groups = (N + R - 1) / R;
    const int stride = gridDim.x * kWarps;
    const int chunks = K >> 3;
    int g = blockIdx.x * kWarps + (threadIdx.x >> 5);

    const uint4* wrow[R];
    auto rows_of = [&](int group) {
#pragma unroll
        for (int r = 0; r < R; ++r)
            wrow[r] = reinterpret_cast<const uint4*>(w + (size_t)min(group * R + r, N - 1) * K);
    };
    rows_of(min(g, groups - 1));
    uint4 wv[U][R];
    begin_after_previous<R, U>(wrow, chunks, lane, g < groups, wv);
    const uint4* xv = input_row<T>(x, norm_w, eps, smem_raw, K);
    unsigned long long mine = 0;
    for (; g < groups; g += stride) {
        float acc[R];
        warp_row_sums<T, R, U>(wrow, xv, chunks, lane, wv, acc);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = g * R + r;
            if (row < N) {
                mine = max(mine, argmax_key(acc[r], row));
                if (logits != nullptr && lane == r) logits[row] = acc[r];
            }
        }
        const int next = g + stride;
        if (next < groups) {
            rows_of(next);
            first_weight_loads<R, U>(wrow, chunks, lane, true, wv);
        }
    }
    if (lane == 0) block_best[threadIdx.x >> 5] = mine;
    __syncthreads();
    if (threadIdx.x != 0) return;
#pragma unroll
    for (int i = 1; i < kWarps; ++i) mine = max(mine, block_best[i]);
    // A stale read only under-estimates the running maximum (it only grows within a launch).
    if (mine > *reinterpret_cast<volatile unsigned long long*>(best)) atomicMax(best, mine);
    __threadfence();
    if (atomicAdd(done, 1u) != gridDim.x - 1) return;
    __threadfence();  // every block's atomicMax is visible to the last one
    const unsigned long long all = atomicExch(best, 0ull);
    *done = 0u;
    const int t = all == 0 ? 0 : (int)~(unsigned)(all & 0xffffffffu);
    next_token[0] = t;
    if (token != nullptr) advance_state(t, token, pos, lens, history, max_len, capacity);
}

}  // namespace

// Entry points. decode_linear_<dtype>: 4 rows per warp, 2 chunks per row in flight (any
// epilogue); decode_linear_r2_<dtype>: 2 rows, 4 chunks; decode_linear_r1_<dtype>: 1 row, 8
// chunks (unpaired epilogues only) -- more warps, as many loads in flight each, for GEMVs of few
// rows; decode_linear_short_<dtype>: 4 rows of K <= 1024, every chunk loaded before the wait, in
// one pass. The parameter list is declared once, here.
#define PGK_DECODE_LINEAR_PARAMS(T)                                                          \
    (const T* x, const T* norm_w, float eps, const T* w, const T* bias, void* y, T* k_cache, \
     T* v_cache, const void* cos_table, const void* sin_table, const int* pos, int N, int K, \
     int pair, int mode, int f32out, int q_heads, int kv_heads, int head_dim, int capacity,  \
     long long max_pos, int table_kind, const int* gather, int vocab, T* gather_out)
#define PGK_DECODE_LINEAR_ARGS                                                                 \
    x, norm_w, eps, w, bias, y, k_cache, v_cache, cos_table, sin_table, pos, N, K, pair, mode, \
        f32out, q_heads, kv_heads, head_dim, capacity, max_pos, table_kind, gather, vocab,     \
        gather_out
#define PGK_DECODE_LINEAR(sfx, T)                                                                 \
    PGK_KERNEL_BOUNDS(decode_linear_##sfx, PGK_DECODE_LINEAR_PARAMS(T), kWarps * 32) {            \
        decode_linear<T, 4, 2>(PGK_DECODE_LINEAR_ARGS);                                           \
    }                                                                                             \
    PGK_KERNEL_BOUNDS(decode_linear_r2_##sfx, PGK_DECODE_LINEAR_PARAMS(T), kWarps * 32) {         \
        decode_linear<T, 2, 4>(PGK_DECODE_LINEAR_ARGS);                                           \
    }                                                                                             \
    PGK_KERNEL_BOUNDS(decode_linear_r1_##sfx, PGK_DECODE_LINEAR_PARAMS(T), kWarps * 32) {         \
        decode_linear<T, 1, 8>(PGK_DECODE_LINEAR_ARGS);                                           \
    }                                                                                             \
    PGK_KERNEL_BOUNDS(decode_linear_short_##sfx, PGK_DECODE_LINEAR_PARAMS(T), kWarps * 32) {      \
        decode_linear<T, 4, kShortChunks, true>(PGK_DECODE_LINEAR_ARGS);                          \
    }                                                                                             \
    PGK_KERNEL_BOUNDS(decode_head_argmax_##sfx,                                                   \
                      (const T* x, const T* norm_w, float eps, const T* w, int N, int K,          \
                       float* logits, unsigned long long* best, unsigned* done, int* next_token,  \
                       int* token, int* pos, int* lens, int* history, int max_len, int capacity), \
                      kWarps * 32) {                                                              \
        decode_head_argmax<T, 4, 2>(x, norm_w, eps, w, N, K, logits, best, done, next_token,      \
                                    token, pos, lens, history, max_len, capacity);                \
    }
PGK_HALF_TYPES(PGK_DECODE_LINEAR)

// The step's bookkeeping in one thread (instead of five elementwise int32 kernels).
PGK_KERNEL(decode_advance, (const int* next_token, int* token, int* pos, int* lens, int* history,
                            int max_len, int capacity)) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    advance_state(next_token[0], token, pos, lens, history, max_len, capacity);
}

// Launch geometry the host side plans with.
PGK_CONSTANT(DECODE_LINEAR_WARPS, kWarps);
PGK_CONSTANT(DECODE_LINEAR_ROWS_PER_WARP, 4);  // decode_linear_<dtype>; _r2: 2, _r1: 1
PGK_CONSTANT(DECODE_HEAD_ROWS_PER_WARP, 4);
PGK_CONSTANT(DECODE_LINEAR_SHORT_MAX_K, kShortChunks * 32 * 8);  // decode_linear_short: 4 rows
