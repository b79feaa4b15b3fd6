// Warp-specialized flash attention forward on Hopper (sm_90a) with TMA loads and
// FlashAttention-3's ping-pong, head dims 64 and 128: attn_prefill_wgmma_tma, included by
// attention_prefill.cu after attention_prefill_sm90.cuh, whose pieces (swizzled tile layout,
// descriptors, wgmma wrappers, masking, softmax, output) it reuses. Same arguments, masking rules
// and output as the other prefill kernels, plus TMA descriptors of q, k and v.
//   384 threads = 3 warpgroups. Warpgroup 0 is the producer: it gives most of its registers to
//   the consumers (setmaxnreg) and one of its threads loads Q once and the K/V tiles of 128 keys
//   into a ring of 3 stages with cp.async.bulk.tensor (the other producer threads exit).
//   Warpgroups 1 and 2 are consumers of 64 query rows each (CTA tile 128 rows); each runs
//   pipe_tiles, the wgmma_pipe loop (S_j issued, then P_{j-1} V_{j-1}, softmax of S_j while
//   P_{j-1} V_{j-1} runs).
//   Tiles and stages are handed over by mbarriers only, no CTA-wide barrier inside the loop:
//     FULL[s]  (count 1): the producer thread arrives with the tile's bytes as transaction
//              count (expect_tx); the phase completes when TMA has written them all;
//     EMPTY[s] (count 8): lane 0 of each consumer warp arrives once its last wgmma reading
//              stage s (P V of that tile) has completed.
//   Tile j lives in stage j % 3; a wait for its phase uses parity (j / 3) & 1. No waiter can
//   fall a whole phase behind (tile j + 3 needs both consumers' release of tile j, which needs
//   each of them past its wait for tile j), so parity waits cannot be confused. TMA and wgmma
//   both go through the async proxy: no proxy fence between a tile's arrival and its use.
//   Ping-pong: the consumers take turns issuing their matrix multiplies (named barriers 1 and
//   2, 256 threads: one consumer's bar.arrive lets the other's bar.sync pass), so the tensor
//   cores run one consumer's S and P V while the other consumer does its softmax. Consumer 0
//   issues first; consumer 1 skips its last hand-over, which nobody would wait for, so each
//   barrier sees as many arrives as syncs.
// Why TMA: it beat the same kernel with a producer warpgroup issuing 16-byte cp.async
// (docs/ops-attention.md): one instruction per 16 KiB box instead of 1024 cp.async, and no
// proxy fence or arrival per producer thread.
// Shared memory as the other wgmma kernel (Q + 3 stages of K and V, 225 KiB for D = 128 with
// the alignment slack); the six mbarriers are static shared memory (48 bytes).
#pragma once

#ifdef PGK_ATTN_HAS_WGMMA

namespace pgk_attn_sm90 {

constexpr int kWsStages = 3;  // the launch is 384 threads: attention.py _WGMMA_THREADS
// Registers per thread after the hand-over: 128 x 24 + 256 x 240 = 64512, the 168 x 384 the
// CTA starts with (__launch_bounds__(384, 1)). The consumers need ~226 (acc, S, P fragments);
// the producer only addresses.
constexpr int kProducerRegs = 24, kConsumerRegs = 240;

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile(
            "{\n.reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
// One box of a 3-d tensor map ({column, row, head} innermost first) into shared memory at dst;
// its bytes count towards bar's transaction count. Rows past the tensor's end arrive as zeros.
__device__ __forceinline__ void tma_load_3d(unsigned dst, const CUtensorMap* map, int c0, int c1,
                                            int c2, unsigned bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}

// The TMA producer's tiles: Q, K and V seen as [B * H, S, D] with boxes of 128 rows x 64
// columns and a 128-byte swizzle, which is load_tile's layout (16-byte chunk c of a 128-byte
// row r at c ^ (r % 8), column blocks of 64 kBlockBytes apart) when dst is 1 KiB aligned.
struct TmaMaps {
    const CUtensorMap *q, *k, *v;
};
template <int kD>
__device__ __forceinline__ void tma_tile(unsigned dst, const CUtensorMap* map, int row, int bh,
                                         unsigned bar) {
#pragma unroll
    for (int blk = 0; blk < kD / 64; ++blk)
        tma_load_3d(dst + blk * kBlockBytes, map, blk * 64, row, bh, bar);
}

// Ping-pong turns: wait until it is consumer c's turn to issue, hand the turn to the other.
// Barrier ids are immediates (with a register id ptxas reserves all 16 barriers).
__device__ __forceinline__ void turn_wait(int c) {
    if (c == 0)
        asm volatile("bar.sync 1, 256;\n" ::: "memory");
    else
        asm volatile("bar.sync 2, 256;\n" ::: "memory");
}
__device__ __forceinline__ void turn_pass(int c) {
    if (c == 0)
        asm volatile("bar.arrive 2, 256;\n" ::: "memory");
    else
        asm volatile("bar.arrive 1, 256;\n" ::: "memory");
}

template <typename T, int kD>
__device__ __forceinline__ void attn_prefill_wgmma_tma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const void* __restrict__ mask, int mask_kind, long long msb, long long msh, long long msq,
    long long msk, int hq, int hkv, int sq, int sk, float scale, int causal, int o_seq,
    const TmaMaps& maps) {
    constexpr unsigned kTileBytes = (kD / 64) * kBlockBytes;
    constexpr unsigned kQBytes = kTileBytes, kStageBytes = 2 * kTileBytes;
    extern __shared__ unsigned char smem_raw[];
    __shared__ __align__(8) unsigned long long bars[2 * kWsStages];  // FULL[s], EMPTY[s]
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base;
    const unsigned full0 = smem_addr(&bars[0]), empty0 = smem_addr(&bars[kWsStages]);

    const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
    // Warp-uniform (broadcast from lane 0): wgmma and setmaxnreg under branches on it are then
    // not treated as divergent.
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
    const int g = lane >> 2, t = lane & 3;
    const PrefillTile<T, kD> tile(q, k, v, o, hq, hkv, sq, sk, causal, o_seq);
    const int n_tiles = tile.n_tiles;
    auto stage = [&](int j) { return base + kQBytes + (j % kWsStages) * kStageBytes; };
    auto parity = [](int j) { return static_cast<unsigned>((j / kWsStages) & 1); };

    if (tid == 0) {
        for (int s = 0; s < kWsStages; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 8);
        }
        // Visible to the async proxy (TMA's complete_tx) as well as to the other threads.
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // the barriers are initialized before anyone arrives or waits

    if (wg == 0) {
        // Producer: one thread issues every load; the stage's FULL barrier counts its bytes.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
        if (tid != 0) return;
        const int bhq = tile.b * hq + tile.h, bhk = tile.b * hkv + tile.h / (hq / hkv);
        for (int j = 0; j < n_tiles; ++j) {
            const unsigned full = full0 + 8 * (j % kWsStages);
            if (j >= kWsStages) mbar_wait(empty0 + 8 * (j % kWsStages), parity(j) ^ 1);
            // Q rides with tile 0: the consumers' wait for FULL of tile 0 covers it.
            mbar_expect_tx(full, (j == 0 ? 3 : 2) * kTileBytes);
            if (j == 0) tma_tile<kD>(sQ, maps.q, tile.m0, bhq, full);
            tma_tile<kD>(stage(j), maps.k, j * kBN, bhk, full);
            tma_tile<kD>(stage(j) + kTileBytes, maps.v, j * kBN, bhk, full);
        }
        return;  // the consumers' FULL waits cover every load still in flight
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int c = wg - 1;                   // consumer: rows c * 64 + [0, 64) of the tile
    const int r0 = c * 64 + warp * 16 + g;  // rows r0 and r0 + 8 of the tile
    RowState<kD> st;
    const ScoreRules rules{
        scale * kLog2e, mask, mask_kind, tile.b * msb + tile.h * msh, msq, msk, sq, sk, causal};
    auto softmax_tile = [&](float (&s)[64], int j) {
        softmax_tile_of<T>(s, j, tile, r0, t, rules, st);
    };
    auto acquire = [&](int j) { mbar_wait(full0 + 8 * (j % kWsStages), parity(j)); };
    // Called after a wait_group that completed the last wgmma reading tile j (its P V); the
    // wait is warpgroup-wide, so one lane per warp speaks for the warp.
    auto release = [&](int j) {
        if (lane == 0) mbar_arrive(empty0 + 8 * (j % kWsStages));
    };

    if (n_tiles == 0) {
        store_out<T, kD>(tile.op, st.acc, st.row_sum, r0, t, tile.rows_here, tile.o_row);
        return;
    }
    // Consumer 0 issues first; consumer 1 is done issuing after its last P V: no hand-over back.
    if (c == 1) turn_pass(c);
    pipe_tiles<T, kD>(
        st.acc, st.pa, st.alpha, n_tiles, sQ, c, stage, softmax_tile, acquire,
        [&] { turn_wait(c); }, [&] { turn_pass(c); },
        [&] {
            if (c == 0) turn_pass(c);
        },
        release, [] {});  // the last release: nobody waits for it; one arrival per tile per warp
    store_out<T, kD>(tile.op, st.acc, st.row_sum, r0, t, tile.rows_here, tile.o_row);
}

}  // namespace pgk_attn_sm90
#endif  // PGK_ATTN_HAS_WGMMA
