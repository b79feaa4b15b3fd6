// Flash attention forward on Hopper with wgmma (sm_90a), head dims 64 and 128: included by
// attention_prefill.cu, which declares the entry points attn_prefill_wgmma_pipe_d<D>_<f16|bf16>.
// Same arguments, masking rules and output as the mma.sync kernel (see there); only the
// tiling differs:
//   256 threads = 2 warpgroups, each owning 64 of the CTA's 128 query rows; key tiles of 128.
//   S = Q K^T: wgmma m64n128k16 with Q and K both read from shared memory (K-major, 128-byte
//     swizzle: 16-byte chunk c of a 128-byte row r sits at chunk c ^ (r % 8); rows of D
//     elements are stored as D / 64 column blocks of 64 elements, 16 KiB each).
//   O += P V: wgmma with P from registers (the S accumulator layout is the A-fragment layout,
//     as with mma.sync) and V read MN-major (transposed), its 64-column blocks LBO apart.
//   K/V tiles in 3 stages (see attn_prefill_wgmma_pipe for who reads which stage when).
// The pieces before the kernel (swizzled tile loads, descriptors, wgmma wrappers, masking,
// softmax, output) are shared with the warp-specialized kernel (attention_prefill_sm90_tma.cuh).
// Shared memory: Q + 3 stages x (K + V), D / 64 x 16 KiB each, 1 KiB aligned (swizzle atoms):
// 224 KiB for D = 128, 112 KiB for D = 64.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PGK_ATTN_HAS_WGMMA 1
#endif

#ifdef PGK_ATTN_HAS_WGMMA
#include "pygpukit/wgmma.cuh"

namespace pgk_attn_sm90 {

using namespace pgk_attn;

constexpr int kThreads = 256, kBM = 128, kBN = 128;
constexpr unsigned kBlockBytes = 128 * 128;  // one 64-column block of a 128-row tile

__device__ __forceinline__ void cp_async16_s(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}

// Shared-memory matrix descriptor: start, leading/stride byte offsets, 128-byte swizzle.
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |
           (static_cast<unsigned long long>(lbo >> 4) << 16) |
           (static_cast<unsigned long long>(sbo >> 4) << 32) | (1ull << 62);
}

// A 128 x D tile (rows past valid_rows zero-filled) into D / 64 swizzled column blocks.
template <typename T, int kD>
__device__ __forceinline__ void load_tile(unsigned dst, const T* src, int valid_rows) {
    constexpr int kChunks = kD / 8;
#pragma unroll
    for (int i = 0; i < 128 * kChunks / kThreads; ++i) {
        const int c = threadIdx.x + i * kThreads;
        const int r = c / kChunks, chunk = c % kChunks, blk = chunk >> 3, ch = chunk & 7;
        const bool valid = r < valid_rows;
        cp_async16_s(dst + blk * kBlockBytes + r * 128 + ((ch ^ (r & 7)) << 4),
                     valid ? src + (size_t)r * kD + chunk * 8 : src, valid);
    }
}

// S += Q K^T over one k-step; kFirst: S = Q K^T (S's old values ignored: it needs no zeroing).
template <bool kFirst>
__device__ __forceinline__ void mma_qk(float (&d)[64], unsigned long long da, unsigned long long db,
                                       __nv_bfloat16) {
    if constexpr (kFirst)
        PGK_WGMMA_SS_BF16_ZERO(d, da, db);
    else
        PGK_WGMMA_SS_BF16(d, da, db);
}
template <bool kFirst>
__device__ __forceinline__ void mma_qk(float (&d)[64], unsigned long long da, unsigned long long db,
                                       __half) {
    if constexpr (kFirst)
        PGK_WGMMA_SS_F16_ZERO(d, da, db);
    else
        PGK_WGMMA_SS_F16(d, da, db);
}
__device__ __forceinline__ void mma_pv(float (&d)[64], const unsigned (&a)[4],
                                       unsigned long long db, __nv_bfloat16) {
    PGK_WGMMA_RS_BF16(d, a, db);
}
__device__ __forceinline__ void mma_pv(float (&d)[64], const unsigned (&a)[4],
                                       unsigned long long db, __half) {
    PGK_WGMMA_RS_F16(d, a, db);
}
__device__ __forceinline__ void mma_pv(float (&d)[32], const unsigned (&a)[4],
                                       unsigned long long db, __nv_bfloat16) {
    PGK_WGMMA_RS64_BF16(d, a, db);
}
__device__ __forceinline__ void mma_pv(float (&d)[32], const unsigned (&a)[4],
                                       unsigned long long db, __half) {
    PGK_WGMMA_RS64_F16(d, a, db);
}

// Pins registers at this point of the instruction stream (no code): the compiler may then not
// move their definitions or uses across an asynchronous wgmma that reads or writes them.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(unsigned (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i)
        asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1]), "+r"(r[i][2]), "+r"(r[i][3])::"memory");
}

// Scales S (log2 domain), adds the mask and sets keys past the end or above the causal
// diagonal to -inf: for the tiles that touch an edge (or any masked call); softmax_tile_of
// folds the scale of the others into softmax_rows.
template <typename T>
__device__ __forceinline__ void scale_mask(float (&s)[64], float scale2, const void* mask,
                                           int mask_kind, long long mbase, long long msq,
                                           long long msk, int row0, int n0, int t, int sq, int sk,
                                           int causal, int diag) {
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float x = s[4 * nt + e] * scale2;
            const int row = row0 + (e >> 1) * 8;
            const int col = n0 + nt * 8 + 2 * t + (e & 1);
            if (mask_kind && row < sq && col < sk) {
                const long long idx = mbase + row * msq + col * msk;
                const float mv = mask_kind == 1 ? static_cast<const float*>(mask)[idx]
                                                : widen(static_cast<const T*>(mask)[idx]);
                x += mv * kLog2e;
            }
            if (col >= sk || (causal && col > row + diag)) x = PGK_NEG_INF;
            s[4 * nt + e] = x;
        }
    }
}

// Online softmax of one 128-key tile whose scores are S * mul in the log2 domain (mul > 0: the
// scale is folded in here, one FFMA per score, for tiles scale_mask left unscaled; 1 for tiles
// it scaled): new row maxima, P = exp2(S * mul - max) in place, running sums, and
// alpha = exp2(old max - new max), by which the accumulator must be rescaled.
__device__ __forceinline__ void softmax_rows(float (&s)[64], float (&row_max)[2],
                                             float (&row_sum)[2], float (&alpha)[2], float mul) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float mx = PGK_NEG_INF;
#pragma unroll
        for (int nt = 0; nt < kBN / 8; ++nt)
            mx = max_nan(mx, max_nan(s[4 * nt + 2 * r], s[4 * nt + 2 * r + 1]));
        mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = max_nan(row_max[r], mx * mul);              // max(S * mul) = max(S) * mul for mul > 0
        const float ref = mx == PGK_NEG_INF ? 0.f : mx;  // no visible key yet: no NaN
        alpha[r] = fast_exp2(row_max[r] - ref);
        row_max[r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kBN / 8; ++nt) {
            s[4 * nt + 2 * r] = fast_exp2(fmaf(s[4 * nt + 2 * r], mul, -ref));
            s[4 * nt + 2 * r + 1] = fast_exp2(fmaf(s[4 * nt + 2 * r + 1], mul, -ref));
            sum += s[4 * nt + 2 * r] + s[4 * nt + 2 * r + 1];
        }
        row_sum[r] = row_sum[r] * alpha[r] + sum;
    }
}

template <int kAcc>
__device__ __forceinline__ void rescale(float (&acc)[kAcc], const float (&alpha)[2]) {
#pragma unroll
    for (int dt = 0; dt < kAcc / 4; ++dt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            acc[4 * dt + 2 * r] *= alpha[r];
            acc[4 * dt + 2 * r + 1] *= alpha[r];
        }
    }
}

template <typename T, int kD>
struct PrefillTile;

// What scaling and masking S needs besides the tile: the scale in the log2 domain, the optional
// additive mask (kind 1 fp32, 2 the input dtype) with its strides and this (batch, head)'s
// offset, the lengths and the causal flag.
struct ScoreRules {
    float scale2;
    const void* mask;
    int mask_kind;
    long long mbase, msq, msk;
    int sq, sk, causal;
};

// One warpgroup's running state over its 64 query rows (rows r0 and r0 + 8 per thread): the O
// accumulator, the online softmax's row maxima and sums, the last rescale factors, and
// P_{j-1} as A fragments.
template <int kD>
struct RowState {
    float acc[kD / 2];
    float row_max[2] = {PGK_NEG_INF, PGK_NEG_INF}, row_sum[2] = {0.f, 0.f}, alpha[2];
    unsigned pa[kBN / 16][4];
    __device__ __forceinline__ RowState() {
#pragma unroll
        for (int i = 0; i < kD / 2; ++i) acc[i] = 0.f;
    }
};

// Scale, mask and online softmax of S_j for rows r0 and r0 + 8 of the tile. Interior tiles (no
// key past the end or above the diagonal, no mask) skip scale_mask: softmax_rows folds the scale
// into its exp2 argument. A scale <= 0 takes the scale_mask path everywhere (the folding needs
// max(S * scale) = max(S) * scale).
template <typename T, int kD>
__device__ __forceinline__ void softmax_tile_of(float (&s)[64], int j,
                                                const PrefillTile<T, kD>& tile, int r0, int t,
                                                const ScoreRules& rules, RowState<kD>& st) {
    const int n0 = j * kBN;
    const bool edge = n0 + kBN > rules.sk || (rules.causal && n0 + kBN - 1 > tile.m0 + tile.diag) ||
                      rules.mask_kind || !(rules.scale2 > 0.f);
    if (edge)
        scale_mask<T>(s, rules.scale2, rules.mask, rules.mask_kind, rules.mbase, rules.msq,
                      rules.msk, tile.m0 + r0, n0, t, rules.sq, rules.sk, rules.causal, tile.diag);
    softmax_rows(s, st.row_max, st.row_sum, st.alpha, edge ? 1.f : rules.scale2);
}

// P as A fragments (the S accumulator layout is the A-fragment layout).
template <typename T>
__device__ __forceinline__ void pack_p(unsigned (&pa)[kBN / 16][4], const float (&s)[64]) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
        pa[kk][0] = Half2<T>::pack(s[8 * kk + 0], s[8 * kk + 1]);
        pa[kk][1] = Half2<T>::pack(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = Half2<T>::pack(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = Half2<T>::pack(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

// O / row sum into rows r0 and r0 + 8 of the CTA's output tile (rows row_stride apart).
template <typename T, int kD>
__device__ __forceinline__ void store_out(T* op, const float (&acc)[kD / 2],
                                          const float (&row_sum)[2], int r0, int t, int rows_here,
                                          size_t row_stride) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l != 0.f ? 1.f / l : 0.f;
        const int row = r0 + r * 8;
        if (row < rows_here) {
            unsigned* dst = reinterpret_cast<unsigned*>(op + row * row_stride + 2 * t);
#pragma unroll
            for (int dt = 0; dt < kD / 8; ++dt)
                dst[dt * 4] =
                    Half2<T>::pack(acc[4 * dt + 2 * r] * inv, acc[4 * dt + 2 * r + 1] * inv);
        }
    }
}

// S = Q K^T for one warpgroup's 64 rows (the first k-step overwrites s: no zeroing needed).
template <typename T, int kD>
__device__ __forceinline__ void issue_qk(float (&s)[64], unsigned sQ, unsigned sK, int wg) {
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
        const unsigned blk = (ks >> 2) * kBlockBytes, kofs = (ks & 3) * 32;
        const unsigned long long da = desc(sQ + blk + wg * 64 * 128 + kofs, 16, 1024);
        const unsigned long long db = desc(sK + blk + kofs, 16, 1024);
        if (ks == 0)
            mma_qk<true>(s, da, db, T());
        else
            mma_qk<false>(s, da, db, T());
    }
}

// O += P V over one 128-key tile.
template <typename T, int kAcc>
__device__ __forceinline__ void issue_pv(float (&acc)[kAcc], const unsigned (&pa)[kBN / 16][4],
                                         unsigned sV) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
        mma_pv(acc, pa[kk], desc(sV + kk * 2048, kBlockBytes, 1024), T());
}

// Where one CTA's query rows and their keys live (which rows: PrefillOrder); key tiles end at
// the causal diagonal. The output is [B, Hq, Sq, D], or with o_seq [B, Sq, Hq, D] (the layout
// the output projection reads: rows Hq * D apart).
template <typename T, int kD>
struct PrefillTile {
    int m0, h, b, diag, rows_here, n_tiles;
    const T *qp, *kp, *vp;
    T* op;
    size_t o_row;
    __device__ __forceinline__ PrefillTile(const T* q, const T* k, const T* v, T* o, int hq,
                                           int hkv, int sq, int sk, int causal, int o_seq) {
        const PrefillOrder order(sq, kBM, hq);
        init(q, k, v, o, order.m0, order.h, order.b, hq, hkv, sq, sk, causal, o_seq);
    }
    // Work item `item` of the persistent kernel: row tile item % tiles of (batch, head)
    // item / tiles.
    __device__ __forceinline__ PrefillTile(int item, const T* q, const T* k, const T* v, T* o,
                                           int hq, int hkv, int sq, int sk, int causal, int o_seq) {
        const int tiles = (sq + kBM - 1) / kBM, bh = item / tiles;
        init(q, k, v, o, (item - bh * tiles) * kBM, bh % hq, bh / hq, hq, hkv, sq, sk, causal,
             o_seq);
    }
    __device__ __forceinline__ void init(const T* q, const T* k, const T* v, T* o, int m0_, int h_,
                                         int b_, int hq, int hkv, int sq, int sk, int causal,
                                         int o_seq) {
        m0 = m0_, h = h_, b = b_;
        const int hk = h / (hq / hkv);
        diag = sk - sq;
        qp = q + ((size_t)b * hq + h) * sq * kD + (size_t)m0 * kD;
        kp = k + ((size_t)b * hkv + hk) * sk * kD;
        vp = v + ((size_t)b * hkv + hk) * sk * kD;
        o_row = o_seq ? (size_t)hq * kD : (size_t)kD;
        op = o_seq ? o + ((size_t)b * sq + m0) * hq * kD + (size_t)h * kD
                   : o + ((size_t)b * hq + h) * sq * kD + (size_t)m0 * kD;
        rows_here = min(kBM, sq - m0);
        const int n_end = causal ? min(sk, m0 + kBM + diag) : sk;
        n_tiles = n_end > 0 ? (n_end + kBN - 1) / kBN : 0;
    }
};

// One warpgroup's pass over n_tiles >= 1 key tiles, the loop both wgmma kernels run: iteration j
// issues S_j = Q K_j^T, rescales O for tile j - 1 and issues O += P_{j-1} V_{j-1}, waits for S_j
// only (wait_group 1) and runs the softmax of S_j while P_{j-1} V_{j-1} is in flight; then it
// waits for everything, so no register is in flight across the loop's back edge (ptxas
// serializes wgmma when loop-carried accumulators are copied while in flight). Ends with the
// last P V done. The kernels differ only in the hooks:
//   acquire(j)     tile j's K and V are in shared memory and visible to wgmma;
//   turn_wait()    right before this warpgroup issues wgmma, turn_pass() right after;
//   last_pass()    after the last issue (in place of turn_pass);
//   release(j)     the last wgmma reading tile j (its P V) has completed;
//   q_done()       the last wgmma reading Q (the last S) has completed.
template <typename T, int kD, typename Stage, typename Softmax, typename Acquire, typename TurnWait,
          typename TurnPass, typename LastPass, typename Release, typename QDone>
__device__ __forceinline__ void pipe_tiles(float (&acc)[kD / 2], unsigned (&pa)[kBN / 16][4],
                                           float (&alpha)[2], int n_tiles, unsigned sQ, int wg,
                                           Stage stage, Softmax softmax_tile, Acquire acquire,
                                           TurnWait turn_wait, TurnPass turn_pass,
                                           LastPass last_pass, Release release, QDone q_done) {
    constexpr unsigned kTileBytes = (kD / 64) * kBlockBytes;
    {  // tile 0: S_0 and its softmax, nothing to overlap with yet
        acquire(0);
        float s[64];  // written by the first k-step of S = Q K^T
        turn_wait();
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        issue_qk<T, kD>(s, sQ, stage(0), wg);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        turn_pass();
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (n_tiles == 1) q_done();
        softmax_tile(s, 0);
        pack_p<T>(pa, s);
    }
    for (int j = 1; j < n_tiles; ++j) {
        acquire(j);
        float s[64];          // written by the first k-step of S = Q K^T
        rescale(acc, alpha);  // for tile j - 1, before its P V is issued
        // Every register the wgmma below use is written before the fence (not sunk past it).
        fence_regs(s);
        fence_regs(acc);
        fence_regs(pa);
        turn_wait();
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        issue_qk<T, kD>(s, sQ, stage(j), wg);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        issue_pv<T>(acc, pa, stage(j - 1) + kTileBytes);
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        turn_pass();
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // S_j
        fence_regs(s);
        if (j == n_tiles - 1) q_done();
        softmax_tile(s, j);  // overlaps P_{j-1} V_{j-1}
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        fence_regs(acc);
        release(j - 1);
        pack_p<T>(pa, s);  // pa was read by P_{j-1} V_{j-1}: only after the wait
    }
    rescale(acc, alpha);
    fence_regs(acc);
    fence_regs(pa);
    turn_wait();
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    issue_pv<T>(acc, pa, stage(n_tiles - 1) + kTileBytes);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    last_pass();
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    release(n_tiles - 1);
}

// The kernel (PYGPUKIT_ATTENTION_KERNEL=wgmma_pipe; the default is wgmma_tma): both warpgroups run
// pipe_tiles, each overlapping its own softmax with its own tensor-core work, and every thread
// loads a share of each tile. K/V in 3 stages: while S_j reads tile j and P_{j-1} V_{j-1} reads
// tile j - 1, tile j + 1 streams into the stage tile j - 2 left, whose last reader (P_{j-2}
// V_{j-2}) every warp waited for before the barrier that precedes the refill.
template <typename T, int kD>
__device__ __forceinline__ void attn_prefill_wgmma_pipe(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const void* __restrict__ mask, int mask_kind, long long msb, long long msh, long long msq,
    long long msk, int hq, int hkv, int sq, int sk, float scale, int causal, int o_seq) {
    constexpr unsigned kTileBytes = (kD / 64) * kBlockBytes;
    constexpr unsigned kQBytes = kTileBytes, kStageBytes = 2 * kTileBytes;
    constexpr int kStages = 3;
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base;

    const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
    // Broadcast from lane 0 so the compiler knows wg is warp-uniform: wgmma under a branch
    // on it is then not treated as divergent (which would serialize every wgmma).
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int g = lane >> 2, t = lane & 3;
    const PrefillTile<T, kD> tile(q, k, v, o, hq, hkv, sq, sk, causal, o_seq);
    const int n_tiles = tile.n_tiles;
    const int r0 = wg * 64 + warp * 16 + g;  // rows r0 and r0 + 8 of the tile

    RowState<kD> st;
    const ScoreRules rules{
        scale * kLog2e, mask, mask_kind, tile.b * msb + tile.h * msh, msq, msk, sq, sk, causal};
    auto stage = [&](int j) { return base + kQBytes + (j % kStages) * kStageBytes; };
    auto load_kv = [&](int j) {
        const int n0 = j * kBN, rows = min(kBN, sk - n0);
        load_tile<T, kD>(stage(j), tile.kp + (size_t)n0 * kD, rows);
        load_tile<T, kD>(stage(j) + kTileBytes, tile.vp + (size_t)n0 * kD, rows);
    };
    auto softmax_tile = [&](float (&s)[64], int j) {
        softmax_tile_of<T>(s, j, tile, r0, t, rules, st);
    };
    // Waits for tile j (the only cp.async group in flight) and refills the stage of tile j - 2.
    auto next_tile = [&](int j) {
        asm volatile("cp.async.wait_group 0;\n" ::);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if (j + 1 < n_tiles) load_kv(j + 1);
        asm volatile("cp.async.commit_group;\n" ::);
    };
    auto nothing = [] {};

    if (n_tiles == 0) {
        store_out<T, kD>(tile.op, st.acc, st.row_sum, r0, t, tile.rows_here, tile.o_row);
        return;
    }
    load_tile<T, kD>(sQ, tile.qp, tile.rows_here);
    load_kv(0);
    asm volatile("cp.async.commit_group;\n" ::);
    // The CTA-wide barrier in next_tile paces both warpgroups: no turns, and a stage is free
    // once every warp has passed the barrier after its last reader.
    pipe_tiles<T, kD>(
        st.acc, st.pa, st.alpha, n_tiles, sQ, wg, stage, softmax_tile, next_tile, nothing, nothing,
        nothing, [](int) {}, nothing);
    asm volatile("cp.async.wait_group 0;\n" ::);
    store_out<T, kD>(tile.op, st.acc, st.row_sum, r0, t, tile.rows_here, tile.o_row);
}

}  // namespace pgk_attn_sm90
#endif  // PGK_ATTN_HAS_WGMMA
