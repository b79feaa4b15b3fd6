// Persistent warp-specialized flash attention forward on Hopper (sm_90a):
// attn_prefill_wgmma_persist, included by attention_prefill.cu after
// attention_prefill_sm90_tma.cuh, whose producer/consumer split, TMA loads, mbarrier ring and
// ping-pong it keeps. What changes is who picks the work:
//   The grid is at most one CTA per SM, and each CTA runs a list of work items (one 128-row query
//   tile of one (batch, head) each), given by the host in `sched`: sched[0 .. grid] are the
//   offsets of each CTA's list in the items that follow (item = (b * Hq + h) * row tiles + row
//   tile). The host builds the lists as the hardware would hand out CTAs, longest causal tiles
//   first, each to the CTA that is free first (attention.py _prefill_schedule), so the balance
//   of a dynamic scheduler comes with no counter to reset between launches.
//   Why: with one CTA per SM (225 KiB of shared memory), a new CTA cannot start while the old one
//   drains; its start (barriers, Q and the first K/V tile in flight) and its end (the output
//   stores) leave the tensor cores idle for a few microseconds per tile. Here the producer keeps
//   loading across items: the next item's Q and first tiles are in flight while the consumers
//   finish the current one.
//   The K/V ring runs on across items (a CTA-wide tile counter picks stage and parity). Q has one
//   buffer: the consumers release it (QFREE, 8 warp arrivals) once the item's last S = Q K^T has
//   completed, and the producer waits for that before loading the next item's Q, which rides on
//   the FULL barrier of the item's first tile as in attn_prefill_wgmma_tma (after that tile's K
//   and V, which need not wait). The next item's Q is prefetched into L2 when an item starts.
//   Ping-pong turns continue across items: consumer 1 hands the turn back after its last issue
//   of every item, and consumer 0 takes the one hand-over left over at the end, so every named
//   barrier sees as many arrives as syncs.
#pragma once

#ifdef PGK_ATTN_HAS_WGMMA

namespace pgk_attn_sm90 {

// Asks TMA to bring one tile (kD / 64 boxes) into L2 ahead of its load.
template <int kD>
__device__ __forceinline__ void tma_prefetch_tile(const CUtensorMap* map, int row, int bh) {
#pragma unroll
    for (int blk = 0; blk < kD / 64; ++blk)
        asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(
                         reinterpret_cast<unsigned long long>(map)),
                     "r"(blk * 64), "r"(row), "r"(bh)
                     : "memory");
}

template <typename T, int kD>
__device__ __forceinline__ void attn_prefill_wgmma_persist(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    const void* __restrict__ mask, int mask_kind, long long msb, long long msh, long long msq,
    long long msk, int hq, int hkv, int sq, int sk, float scale, int causal, int o_seq,
    const TmaMaps& maps, const int* __restrict__ sched) {
    constexpr unsigned kTileBytes = (kD / 64) * kBlockBytes;
    constexpr unsigned kQBytes = kTileBytes, kStageBytes = 2 * kTileBytes;
    extern __shared__ unsigned char smem_raw[];
    // FULL[s], EMPTY[s], QFREE
    __shared__ __align__(8) unsigned long long bars[2 * kWsStages + 1];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base;
    const unsigned full0 = smem_addr(&bars[0]), empty0 = smem_addr(&bars[kWsStages]);
    const unsigned qfree = smem_addr(&bars[2 * kWsStages]);

    const int tid = threadIdx.x, warp = (tid % 128) / 32, lane = tid % 32;
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);  // warp-uniform (see the tma kernel)
    const int g = lane >> 2, t = lane & 3;
    const int first = sched[blockIdx.x], last = sched[blockIdx.x + 1];
    const int* items = sched + gridDim.x + 1;
    auto stage = [&](int n) { return base + kQBytes + (n % kWsStages) * kStageBytes; };
    auto parity = [](int n) { return static_cast<unsigned>((n / kWsStages) & 1); };

    if (tid == 0) {
        for (int s = 0; s < kWsStages; ++s) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 8);
        }
        mbar_init(qfree, 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
        if (tid != 0) return;
        int n = 0, q_loads = 0;  // K/V tiles and Q tiles loaded so far by this CTA
        for (int i = first; i < last; ++i) {
            const PrefillTile<T, kD> tile(items[i], q, k, v, o, hq, hkv, sq, sk, causal, o_seq);
            if (tile.n_tiles == 0) continue;  // rows with no key: the consumers write zeros
            const int bhq = tile.b * hq + tile.h, bhk = tile.b * hkv + tile.h / (hq / hkv);
            if (i + 1 < last) {  // the next item's Q into L2 now, so its load after QFREE is short
                const int next = items[i + 1], tiles = (sq + kBM - 1) / kBM;
                tma_prefetch_tile<kD>(maps.q, (next % tiles) * kBM, next / tiles);
            }
            for (int j = 0; j < tile.n_tiles; ++j, ++n) {
                const unsigned full = full0 + 8 * (n % kWsStages);
                if (n >= kWsStages) mbar_wait(empty0 + 8 * (n % kWsStages), parity(n) ^ 1);
                mbar_expect_tx(full, (j == 0 ? 3 : 2) * kTileBytes);
                tma_tile<kD>(stage(n), maps.k, j * kBN, bhk, full);
                tma_tile<kD>(stage(n) + kTileBytes, maps.v, j * kBN, bhk, full);
                if (j == 0) {
                    // Q rides on tile 0's barrier (its transaction count covers Q too), loaded
                    // once the last item's S are done: K and V go first, not held up by that.
                    if (q_loads > 0) mbar_wait(qfree, (q_loads - 1) & 1);
                    ++q_loads;
                    tma_tile<kD>(sQ, maps.q, tile.m0, bhq, full);
                }
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
    const int c = wg - 1;
    const int r0 = c * 64 + warp * 16 + g;
    int n0 = 0;                // the CTA's tile counter at the current item's first tile
    if (c == 1) turn_pass(c);  // consumer 0 issues first
    for (int i = first; i < last; ++i) {
        const PrefillTile<T, kD> tile(items[i], q, k, v, o, hq, hkv, sq, sk, causal, o_seq);
        RowState<kD> st;
        if (tile.n_tiles > 0) {
            const ScoreRules rules{
                scale * kLog2e, mask, mask_kind, tile.b * msb + tile.h * msh, msq, msk, sq, sk,
                causal};
            auto softmax_tile = [&](float (&s)[64], int j) {
                softmax_tile_of<T>(s, j, tile, r0, t, rules, st);
            };
            auto item_stage = [&](int j) { return stage(n0 + j); };
            auto acquire = [&](int j) {
                mbar_wait(full0 + 8 * ((n0 + j) % kWsStages), parity(n0 + j));
            };
            auto release = [&](int j) {
                if (lane == 0) mbar_arrive(empty0 + 8 * ((n0 + j) % kWsStages));
            };
            auto q_done = [&] {
                if (lane == 0) mbar_arrive(qfree);
            };
            // Both consumers hand the turn over after their last issue: consumer 0 takes the
            // extra one consumer 1 leaves after the CTA's last item (below).
            pipe_tiles<T, kD>(
                st.acc, st.pa, st.alpha, tile.n_tiles, sQ, c, item_stage, softmax_tile, acquire,
                [&] { turn_wait(c); }, [&] { turn_pass(c); }, [&] { turn_pass(c); }, release,
                q_done);
            n0 += tile.n_tiles;
        }
        store_out<T, kD>(tile.op, st.acc, st.row_sum, r0, t, tile.rows_here, tile.o_row);
    }
    if (c == 0) turn_wait(c);  // consumer 1's initial hand-over or its last one
}

}  // namespace pgk_attn_sm90
#endif  // PGK_ATTN_HAS_WGMMA
