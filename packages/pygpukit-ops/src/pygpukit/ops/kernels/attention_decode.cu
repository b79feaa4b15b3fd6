// Decode attention (one new query token per sequence) over a KV cache, flash-decoding style:
//   attn_decode_d<D>_<f16|bf16>: grid (splits, Hkv * ceil(G / 4), B), 128 threads. Each CTA
//     reads the keys [split * chunk, min((split + 1) * chunk, len)) of one KV head once and
//     scores them against up to kG = 4 of the G = Hq / Hkv query heads that share it (GQA).
//   attn_decode_combine_<f16|bf16>: grid (B * Hq), merges the per-split partial results by
//     their log-sum-exp. With one split the first kernel writes the output itself.
//   Fused combine (counters non-null): no second kernel. Each split CTA stores its partials,
//     then counts itself done on its (batch, head chunk)'s counter; the CTA that counts last
//     merges every split's partials into the output and resets the counter to 0 for the next
//     launch (the counters start at zero and are left at zero, so they need no clearing).
// The split kernels' argument `early` changes no result (a fused-combine kernel lets a dependent
// successor launch after its key loop; see allow_combine).
// Caches: contiguous [B, Hkv, cache_len, D] (block_table null), or paged
// [num_blocks, Hkv, cache_len = block_size, D] with block_table int32 [B, max_blocks]. seq_lens
// is read on the device; lengths are clamped to the cache capacity, length 0 gives zeros.
// Inside a CTA, a group of kLanes lanes owns one key row at a time (16 bytes a lane, one
// vector load), so a warp keeps 32 / kLanes rows in flight per step and kUnroll steps are
// loaded before any is used. Each group keeps its own running max / sum / output (base-2
// online softmax); the groups are merged through shared memory at the end.
// Dynamic shared memory of attn_decode_mma2_* and attn_decode_bulk2_* (S = 2 K/V stages),
// attn_decode_bulk3_* (S = 3) and attn_decode_mma_* (S = 1): (16 + 2 * S * 64) * (D + 8) * 2
// bytes; of attn_decode_tma<S>_*: 16 * (D + 8) * 2 + 1024 + S * 2 * 64 * D * 2 bytes.
#include "attention_common.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_attn;

namespace {

constexpr int kThreads = 128;
constexpr int kG = 4;       // query heads per CTA
constexpr int kUnroll = 4;  // key rows per group per step
constexpr int kMaxSplits = 64;

// Programmatic dependent launch (SM 9.0+; no-ops elsewhere and when the next kernel is launched
// plainly): with a combine kernel to follow, each split CTA lets it launch once its key loop is
// done, so its launch overlaps the last CTAs' merges. Otherwise the kernel triggers only by
// exiting: a dependent successor launched early would take the one free block slot per SM
// (the split plans two or three resident blocks per SM), and the rest of its blocks would then
// crowd some SMs and leave others nearly idle (measured on an H200 with two blocks per SM planned:
// 81 us against 74). With `early` set, a fused-combine kernel lets its successor launch after its
// key loop too (for splits that fill nearly every block slot, where no such crowding can occur:
// its blocks then wait on the slots the merging blocks free). A kernel
// launched dependent waits for the previous one (its results complete and visible) before
// reading anything it may have written.
__device__ __forceinline__ void allow_combine() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void wait_for_splits() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous() { wait_for_splits(); }

// The fused combine, run by every thread of a split CTA once its partials are stored. Counts the
// CTA done on counters[b, blockIdx.y]; the CTA that completes the count of n_live splits (the
// splits whose key range is not empty) merges the partials of rows [row0, row0 + nh) into out
// by their log-sum-exp and resets the counter. scratch: at least nh * kMaxSplits floats of
// shared memory the caller no longer needs. The fence / atomic / fence order is the one of a
// "last block" reduction: every partial is visible device-wide before its CTA is counted, and
// the last CTA reads them from L2 (ld.cg), past its own L1.
template <typename T>
__device__ __forceinline__ void merge_if_last(const float* o_part, const float* lse,
                                              unsigned* counters, T* out, size_t row0, int nh,
                                              int d_head, int n_live, float* scratch) {
    __shared__ int is_last;
    const int tid = threadIdx.x, splits = gridDim.x;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        unsigned* counter = counters + (size_t)blockIdx.z * gridDim.y + blockIdx.y;
        const unsigned done = atomicAdd(counter, 1u) + 1u;
        is_last = done == static_cast<unsigned>(n_live);
        if (is_last) atomicExch(counter, 0u);  // all n_live CTAs of this launch have counted
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    // Per row: the weights exp2(lse_i - max) / sum, one thread per row.
    if (tid < nh) {
        const float* l = lse + (row0 + tid) * splits;
        float mx = PGK_NEG_INF;
        for (int i = 0; i < n_live; ++i) mx = max_nan(mx, __ldcg(l + i));
        float sum = 0.f;
        for (int i = 0; i < n_live; ++i) {
            const float w = mx == PGK_NEG_INF ? 0.f : fast_exp2(__ldcg(l + i) - mx);
            scratch[tid * kMaxSplits + i] = w;
            sum += w;
        }
        const float inv = sum != 0.f ? 1.f / sum : 0.f;
        for (int i = 0; i < n_live; ++i) scratch[tid * kMaxSplits + i] *= inv;
    }
    __syncthreads();
    // Four values of one row per item, kBatch items per thread at a time and the splits
    // unrolled by 4: up to 16 independent L2 loads in flight per thread (the merge of a
    // batch-1 long cache reads dozens of splits).
    constexpr int kBatch = 4;
    const int quads = d_head / 4, items = nh * quads;
    for (int first = tid; first < items; first += kBatch * blockDim.x) {
        const float4* p[kBatch];
        const float* w[kBatch];
        float4 o[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            const int it = min(first + k * (int)blockDim.x, items - 1);  // past the end: a copy
            const int h = it / quads, d = (it % quads) * 4;
            p[k] = reinterpret_cast<const float4*>(o_part + (row0 + h) * splits * d_head + d);
            w[k] = scratch + h * kMaxSplits;
            o[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll 4
        for (int i = 0; i < n_live; ++i) {
#pragma unroll
            for (int k = 0; k < kBatch; ++k) {
                const float wk = w[k][i];
                const float4 x = __ldcg(p[k] + (size_t)i * (d_head / 4));
                o[k].x = fmaf(wk, x.x, o[k].x);
                o[k].y = fmaf(wk, x.y, o[k].y);
                o[k].z = fmaf(wk, x.z, o[k].z);
                o[k].w = fmaf(wk, x.w, o[k].w);
            }
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            const int it = first + k * (int)blockDim.x;
            if (it >= items) break;
            const int h = it / quads, d = (it % quads) * 4;
            T* dst = out + (row0 + h) * d_head + d;
            dst[0] = static_cast<T>(o[k].x);
            dst[1] = static_cast<T>(o[k].y);
            dst[2] = static_cast<T>(o[k].z);
            dst[3] = static_cast<T>(o[k].w);
        }
    }
}

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
__device__ __forceinline__ void attn_decode(
    const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
    const int* __restrict__ seq_lens, const int* __restrict__ block_table, T* __restrict__ out,
    float* __restrict__ o_part, float* __restrict__ lse, unsigned* __restrict__ counters, int hq,
    int hkv, int cache_len, int max_blocks, int capacity, int chunk, float scale, int early) {
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
    wait_for_previous();
    const int len = min(seq_lens[b], capacity);
    const int t_begin = split * chunk, t_end = min(t_begin + chunk, len);
    // The combine skips an empty split; split 0 always runs, so a length of 0 still gets its
    // (zero) output from the merge.
    if (gridDim.x > 1 && split > 0 && t_begin >= len) return;

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
            for (int u = 0; u < kUnroll; ++u) mx = max_nan(mx, s[u][h]);
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

    if (gridDim.x > 1 && (counters == nullptr || early)) allow_combine();
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
        for (int g2 = 0; g2 < kGroups; ++g2) mx = max_nan(mx, sm_m[g2][h]);
        float sum = 0.f, o = 0.f;
        if (mx != PGK_NEG_INF) {
            for (int g2 = 0; g2 < kGroups; ++g2) {
                const float w = fast_exp2(sm_m[g2][h] - mx);  // 0 for a group that saw no key
                sum += sm_l[g2][h] * w;
                o += sm_acc[g2][h][d] * w;
            }
        }
        const float val = sum != 0.f ? o / sum : 0.f;
        const size_t row = (size_t)b * hq + h0 + h;
        if (gridDim.x == 1) {
            out[row * D + d] = static_cast<T>(val);
        } else {
            o_part[(row * gridDim.x + split) * D + d] = val;
            if (d == 0) lse[row * gridDim.x + split] = sum != 0.f ? mx + __log2f(sum) : PGK_NEG_INF;
        }
    }
    if (gridDim.x > 1 && counters != nullptr)
        merge_if_last<T>(o_part, lse, counters, out, (size_t)b * hq + h0, nh, D,
                         max(1, min((int)gridDim.x, (len + chunk - 1) / chunk)), &sm_acc[0][0][0]);
}

template <typename T>
__device__ __forceinline__ void attn_decode_combine(const float* __restrict__ o_part,
                                                    const float* __restrict__ lse,
                                                    const int* __restrict__ seq_lens,
                                                    T* __restrict__ out, int hq, int d_head,
                                                    int splits, int chunk, int capacity) {
    __shared__ float w[kMaxSplits];
    __shared__ float total;
    wait_for_splits();
    const int row = blockIdx.x, b = row / hq;
    const int len = min(seq_lens[b], capacity);
    const int n = min(splits, (len + chunk - 1) / chunk);  // splits that saw any key
    if (threadIdx.x == 0) {
        float mx = PGK_NEG_INF;
        for (int i = 0; i < n; ++i) mx = max_nan(mx, lse[(size_t)row * splits + i]);
        float sum = 0.f;
        for (int i = 0; i < n; ++i) {
            w[i] = mx == PGK_NEG_INF ? 0.f : fast_exp2(lse[(size_t)row * splits + i] - mx);
            sum += w[i];
        }
        total = sum;
    }
    __syncthreads();
    const float inv = total != 0.f ? 1.f / total : 0.f;
    for (int d = threadIdx.x; d < d_head; d += blockDim.x) {
        float o = 0.f;
        for (int i = 0; i < n; ++i) o += w[i] * o_part[((size_t)row * splits + i) * d_head + d];
        out[(size_t)row * d_head + d] = static_cast<T>(o * inv);
    }
}

// Tensor-core variant (attn_decode_mma_*): the query heads of a KV head are the rows of one
// 16-row m16n8k16 tile (G <= 16 per CTA, unused rows zero), so decode runs the prefill
// kernel's fragment code: S = Q K^T and O += P V per 16 cached tokens, online softmax over the
// tokens. A CTA stages 64 tokens at a time in shared memory (cp.async, one stage: several CTAs
// per SM overlap each other's loads); warp w takes tokens [16 w, 16 w + 16) of each tile and
// keeps its own running max / sum / output, merged across the 4 warps at the end. Far fewer
// instructions per byte than the SIMT kernel above, whose shuffles and per-lane softmax can
// limit it below the memory bandwidth.
constexpr int kTcHeads = 16, kTcTile = 64;

// kStages = S > 1 (attn_decode_mma2_*, PYGPUKIT_DECODE_KERNEL=mma2): tiles i + 1 .. i + S - 1
// stream in while tile i is used, so each CTA keeps the memory busy on its own (at the price of
// fewer CTAs per SM: S times the K/V shared memory). cp.async gets S = 2 only: three and four
// stages at three CTAs per SM were slower on an H200 (docs/ops-attention.md). The bulk-copy
// ring also has S = 3 (attn_decode_bulk3_*): at the split's two CTAs per SM its 109 KB per CTA
// still fit, so the third stage costs no residency there.
// kBulk (attn_decode_bulk2_*, PYGPUKIT_DECODE_KERNEL=bulk2, the default): the same ring, loaded
// by the Tensor Memory Accelerator instead of 16-byte cp.async: each thread copies one whole K or
// V row (cp.async.bulk, D * 2 bytes) into its padded shared row, and the stage's mbarrier counts
// the bytes; the copy engine then keeps the bytes in flight, not each SM's load queue. Rows past
// the end are zeroed by the thread that owns them (a bulk copy has no zero fill). SM 9.0 and
// later only (the host launches them nowhere else; elsewhere they trap).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PGK_DECODE_BULK(...) __VA_ARGS__
#else
#define PGK_DECODE_BULK(...) __trap()
#endif
__device__ __forceinline__ void bulk_row(unsigned dst, const void* src, unsigned bytes,
                                         unsigned bar) {
    PGK_DECODE_BULK(
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], "
                     "[%1], %2, [%3];\n" ::"r"(dst),
                     "l"(src), "r"(bytes), "r"(bar) : "memory"));
}
__device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
    PGK_DECODE_BULK(
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" :: : "memory"));
}
__device__ __forceinline__ void bar_expect_tx(unsigned bar, unsigned bytes) {
    PGK_DECODE_BULK(
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                     "r"(bytes) : "memory"));
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    PGK_DECODE_BULK(unsigned done; do {
        asm volatile(
            "{\n.reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done));
}
// Asks for bytes (a multiple of 16) at src to be brought into L2.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, unsigned bytes) {
    PGK_DECODE_BULK(asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src),
                                 "r"(bytes) : "memory"));
}
// Orders this thread's earlier generic shared-memory writes before later bulk copies.
__device__ __forceinline__ void fence_to_bulk() {
    PGK_DECODE_BULK(asm volatile("fence.proxy.async.shared::cta;\n" :: : "memory"));
}

// kTiles (attn_decode_tma2_*, attn_decode_tma3_*, PYGPUKIT_DECODE_KERNEL=tma2 / tma3): the bulk
// ring filled by tensor copies instead of one bulk copy per row. The caches are seen as 2-d
// [rows, D] tensor maps with boxes of 64 columns (128 bytes, the 128-byte swizzle) by kTcTile
// rows (contiguous caches: one box per column block of a whole tile) or by block_size rows
// (paged caches with block sizes of 8 to 64 dividing 64, or multiples of 64: one box per block
// and column block). One thread (paged: one lane per block) issues a stage's few copies, so each
// SM's copy engine takes a handful of large requests per tile instead of 128 of 256 bytes. A tile
// holds D / 64 column blocks of kTcTile rows x 128 bytes; 16-byte chunk c of row r sits at chunk c
// ^ (r % 8) of its row (the swizzle, which keeps ldmatrix free of bank conflicts without padding).
// Rows past a sequence's end may hold anything (the next head's keys, stale or never written
// slots): their scores are masked, and the V rows are zeroed in shared memory before use (a zero
// weight times a NaN would still be NaN).
constexpr int kTileRowBytes = 128;  // one swizzled row of a column block: 64 16-bit values
__device__ __forceinline__ void tma_load_2d(unsigned dst, const CUtensorMap* map, int col, int row,
                                            unsigned bar) {
    PGK_DECODE_BULK(asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row), "r"(bar) : "memory"));
}
// Byte offset of 16-byte chunk c (of D / 8) of row r in a swizzled tile of kTcTile rows.
__device__ __forceinline__ int swizzled(int r, int c) {
    return (c >> 3) * (kTcTile * kTileRowBytes) + r * kTileRowBytes + (((c & 7) ^ (r & 7)) << 4);
}

template <typename T, int D, int kStages = 1, bool kBulk = false, bool kTiles = false>
__device__ __forceinline__ void attn_decode_mma(
    const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
    const int* __restrict__ seq_lens, const int* __restrict__ block_table, T* __restrict__ out,
    float* __restrict__ o_part, float* __restrict__ lse, unsigned* __restrict__ counters, int hq,
    int hkv, int cache_len, int max_blocks, int capacity, int chunk, float scale, int early,
    const CUtensorMap* k_map = nullptr, const CUtensorMap* v_map = nullptr) {
    static_assert(!kTiles || (kBulk && kStages > 1), "tensor copies fill a multi-stage bulk ring");
    constexpr int kS = D + 8, kChunks = D / 8, kDT = D / 8;
    // kTiles: a swizzled tile of K or V (D / 64 column blocks), and a stage (K then V).
    constexpr int kTileBytes = kTcTile * D * 2, kStageBytes = 2 * kTileBytes;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>(smem_raw);
    T* const sK0 = sQ + kTcHeads * kS;  // kStages x [K tile, V tile]
    // kTiles: the stages start at the first 1 KiB boundary after Q (the swizzle's repeat; the
    // host adds 1 KiB of slack for it).
    unsigned char* const tiles0 =
        smem_raw + ((((smem_addr(sK0) + 1023u) & ~1023u)) - smem_addr(smem_raw));
    __shared__ float sm_m[4][kTcHeads], sm_l[4][kTcHeads];
    __shared__ __align__(8) unsigned long long full[kStages];  // kBulk: stage s has landed

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int split = blockIdx.x, b = blockIdx.z;
    const int group = hq / hkv, n_hchunks = (group + kTcHeads - 1) / kTcHeads;
    const int hk = blockIdx.y / n_hchunks;
    const int h0 = hk * group + (blockIdx.y % n_hchunks) * kTcHeads;
    const int nh = min(kTcHeads, (hk + 1) * group - h0);
    if constexpr (kBulk) {
        // Launched dependent: the keys and values cached before this step do not depend on the
        // previous kernel, so the first tiles of a contiguous cache head for L2 before waiting
        // for it (a prefetch only warms L2, which the previous kernel's writes also reach).
        // The length bounding it may be one the previous kernel is still updating: a stale
        // value only moves the prefetch's end by a token. Everything else (q, the lengths
        // that bound the keys, the block table, the workspace) is read after the wait.
        const int hint = min(__ldcg(seq_lens + b), capacity);
        const int rows = min(kStages * kTcTile, hint - split * chunk);
        if (block_table == nullptr && tid < 2 && rows > 0) {
            const T* first = (tid == 0 ? kc : vc) +
                             (((size_t)b * hkv + hk) * cache_len + (size_t)split * chunk) * D;
            bulk_prefetch_l2(first, rows * D * sizeof(T));
        }
    }
    wait_for_previous();
    const int len = min(seq_lens[b], capacity);
    const int t_begin = split * chunk, t_end = min(t_begin + chunk, len);
    // The combine skips an empty split; split 0 always runs, so a length of 0 still gets its
    // (zero) output from the merge.
    if (gridDim.x > 1 && split > 0 && t_begin >= len) return;

    for (int i = tid; i < kTcHeads * kChunks; i += kThreads) {
        const int r = i / kChunks, c = i % kChunks;
        const bool valid = r < nh;
        cp_async16(sQ + r * kS + c * 8, valid ? q + ((size_t)b * hq + h0 + r) * D + c * 8 : q,
                   valid);
    }
    cp_async_commit();

    float acc[kDT][4];
#pragma unroll
    for (int i = 0; i < kDT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float row_max[2] = {PGK_NEG_INF, PGK_NEG_INF}, row_sum[2] = {0.f, 0.f};
    unsigned qf[D / 16][4];
    const float scale2 = scale * kLog2e;

    if constexpr (kBulk) {
        static_assert(2 * kTcTile == kThreads, "one K or V row per thread");
        if (tid == 0) {
            for (int st = 0; st < kStages; ++st) bar_init(smem_addr(&full[st]), 1);
        }
        __syncthreads();
    }
    // K and V rows [base, base + 64) into stage st.
    auto load_tile = [&](int base, int st) {
        T* sK = sK0 + st * 2 * kTcTile * kS;
        T* sV = sK + kTcTile * kS;
        if constexpr (kTiles) {
            if (tid >= 32) return;  // warp 0 issues the copies
            const unsigned bar = smem_addr(&full[st]);
            const unsigned dk = smem_addr(tiles0 + st * kStageBytes), dv = dk + kTileBytes;
            constexpr int kBlocks = (D + 63) / 64;  // column blocks of 64 values
            if (block_table == nullptr) {
                if (tid != 0) return;
                bar_expect_tx(bar, kStageBytes);  // whole boxes (zeros past the tensor's end)
                const int row = ((b * hkv + hk) * cache_len) + base;
#pragma unroll
                for (int cb = 0; cb < kBlocks; ++cb) {
                    const unsigned off = cb * kTcTile * kTileRowBytes;
                    tma_load_2d(dk + off, k_map, cb * 64, row, bar);
                    tma_load_2d(dv + off, v_map, cb * 64, row, bar);
                }
            } else {
                // Boxes of min(block size, 64) rows, lane i the i-th block's (so the table
                // entries load in parallel); the blocks past the end are not read (their table
                // entries may be anything). The bytes are announced before any copy is issued.
                const int box = min(cache_len, kTcTile);
                const int n = min(kTcTile / box, (t_end - base + box - 1) / box);
                if (tid == 0) bar_expect_tx(bar, 2 * n * box * kTileRowBytes * kBlocks);
                __syncwarp();
                if (tid < n) {
                    const int tk = base + tid * box;
                    const int blk = block_table[(size_t)b * max_blocks + tk / cache_len];
                    const int row = (blk * hkv + hk) * cache_len + tk % cache_len;
#pragma unroll
                    for (int cb = 0; cb < kBlocks; ++cb) {
                        const unsigned off = (cb * kTcTile + tid * box) * kTileRowBytes;
                        tma_load_2d(dk + off, k_map, cb * 64, row, bar);
                        tma_load_2d(dv + off, v_map, cb * 64, row, bar);
                    }
                }
            }
        } else if constexpr (kBulk) {
            constexpr unsigned kRowBytes = D * sizeof(T);
            const unsigned bar = smem_addr(&full[st]);
            if (tid == 0) bar_expect_tx(bar, 2 * min(kTcTile, t_end - base) * kRowBytes);
            const int r = tid % kTcTile, tk = base + r;
            const bool is_v = tid >= kTcTile;
            T* dst = (is_v ? sV : sK) + r * kS;
            if (tk < t_end) {
                size_t row;
                if (block_table != nullptr) {
                    const int blk = block_table[(size_t)b * max_blocks + tk / cache_len];
                    row = ((size_t)blk * hkv + hk) * cache_len + tk % cache_len;
                } else {
                    row = ((size_t)b * hkv + hk) * cache_len + tk;
                }
                bulk_row(smem_addr(dst), (is_v ? vc : kc) + row * D, kRowBytes, bar);
            } else {
#pragma unroll
                for (int c = 0; c < kChunks; ++c)
                    *reinterpret_cast<uint4*>(dst + c * 8) = make_uint4(0, 0, 0, 0);
                fence_to_bulk();  // a later bulk copy may write this row again
            }
        } else {
            for (int i = tid; i < kTcTile * kChunks; i += kThreads) {
                const int r = i / kChunks, c = i % kChunks, tk = base + r;
                const bool valid = tk < t_end;
                size_t row = 0;
                if (valid) {
                    if (block_table != nullptr) {
                        const int blk = block_table[(size_t)b * max_blocks + tk / cache_len];
                        row = ((size_t)blk * hkv + hk) * cache_len + tk % cache_len;
                    } else {
                        row = ((size_t)b * hkv + hk) * cache_len + tk;
                    }
                }
                cp_async16(sK + r * kS + c * 8, valid ? kc + row * D + c * 8 : kc, valid);
                cp_async16(sV + r * kS + c * 8, valid ? vc + row * D + c * 8 : vc, valid);
            }
            cp_async_commit();
        }
    };

    // Tiles 0 .. kStages - 2 in flight before the loop; one commit group per tile, empty past
    // the end, so "all but the newest kStages - 1 groups done" always means "this tile landed".
#pragma unroll
    for (int st = 0; st + 1 < kStages; ++st) {
        if (t_begin + st * kTcTile < t_end)
            load_tile(t_begin + st * kTcTile, st);
        else if (!kBulk)
            cp_async_commit();
    }
    if constexpr (kBulk) cp_async_wait_all();  // Q (the only cp.async group)
    for (int base = t_begin, it = 0; base < t_end; base += kTcTile, ++it) {
        const int st = it % kStages;
        if (kStages == 1) {
            load_tile(base, 0);
            cp_async_wait_all();
        } else {
            // Tile it + kStages - 1 goes to the stage tile it - 1 used: every thread is done
            // with it (iteration it - 1 ended with a barrier).
            const int ahead = base + (kStages - 1) * kTcTile;
            if (ahead < t_end)
                load_tile(ahead, (it + kStages - 1) % kStages);
            else if (!kBulk)
                cp_async_commit();
            if constexpr (kBulk) {
                bar_wait(smem_addr(&full[st]), (it / kStages) & 1);  // tile it
            } else {
                asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 1));  // tile it (and Q)
            }
        }
        if constexpr (kTiles) {
            const int live = t_end - base;
            if (live < kTcTile) {  // the last tile: V rows past the end to zero
                unsigned char* vt = tiles0 + st * kStageBytes + kTileBytes;
                for (int i = tid; i < (kTcTile - live) * kChunks; i += kThreads) {
                    const int r = live + i / kChunks;
                    *reinterpret_cast<uint4*>(vt + swizzled(r, i % kChunks)) =
                        make_uint4(0, 0, 0, 0);
                }
                fence_to_bulk();  // before a later tensor copy into this stage
            }
        }
        __syncthreads();
        const T* sK = sK0 + st * 2 * kTcTile * kS;
        const T* sV = sK + kTcTile * kS;
        const unsigned char* tK = tiles0 + st * kStageBytes;  // kTiles
        const unsigned char* tV = tK + kTileBytes;
        if (base == t_begin) {
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk)
                ldmatrix_x4(qf[kk], sQ + (lane & 15) * kS + kk * 16 + (lane >> 4) * 8);
        }

        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            unsigned bk[4];
            const int kr = warp * 16 + (lane >> 4) * 8 + (lane & 7),
                      kc16 = kk * 2 + ((lane >> 3) & 1);
            if constexpr (kTiles)
                ldmatrix_x4(bk, tK + swizzled(kr, kc16));
            else
                ldmatrix_x4(bk, sK + kr * kS + kc16 * 8);
            mma16816<T>(s[0], qf[kk], bk[0], bk[1]);
            mma16816<T>(s[1], qf[kk], bk[2], bk[3]);
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = base + warp * 16 + nt * 8 + 2 * t + (e & 1);
                s[nt][e] = col < t_end ? s[nt][e] * scale2 : PGK_NEG_INF;
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = max_nan(row_max[r], max_nan(max_nan(s[0][2 * r], s[0][2 * r + 1]),
                                                   max_nan(s[1][2 * r], s[1][2 * r + 1])));
            mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ref = mx == PGK_NEG_INF ? 0.f : mx;  // no token yet: no NaN
            const float alpha = fast_exp2(row_max[r] - ref);
            row_max[r] = mx;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                s[nt][2 * r] = fast_exp2(s[nt][2 * r] - ref);
                s[nt][2 * r + 1] = fast_exp2(s[nt][2 * r + 1] - ref);
                sum += s[nt][2 * r] + s[nt][2 * r + 1];
            }
            row_sum[r] = row_sum[r] * alpha + sum;
#pragma unroll
            for (int dt = 0; dt < kDT; ++dt) {
                acc[dt][2 * r] *= alpha;
                acc[dt][2 * r + 1] *= alpha;
            }
        }
        unsigned pa[4];
        pa[0] = Half2<T>::pack(s[0][0], s[0][1]);
        pa[1] = Half2<T>::pack(s[0][2], s[0][3]);
        pa[2] = Half2<T>::pack(s[1][0], s[1][1]);
        pa[3] = Half2<T>::pack(s[1][2], s[1][3]);
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
            unsigned bv[4];
            const int vr = warp * 16 + ((lane >> 3) & 1) * 8 + (lane & 7),
                      vc16 = dn * 2 + (lane >> 4);
            if constexpr (kTiles)
                ldmatrix_x4_trans(bv, tV + swizzled(vr, vc16));
            else
                ldmatrix_x4_trans(bv, sV + vr * kS + vc16 * 8);
            mma16816<T>(acc[2 * dn], pa, bv[0], bv[1]);
            mma16816<T>(acc[2 * dn + 1], pa, bv[2], bv[3]);
        }
        __syncthreads();  // the next tile overwrites sK / sV
    }

    if (gridDim.x > 1 && (counters == nullptr || early)) allow_combine();
    // Merge the 4 warps through shared memory (the tiles' space, free now).
    cp_async_wait_all();  // the Q copy, when no tile ran
    __syncthreads();
    float* sm_acc = reinterpret_cast<float*>(smem_raw);  // [4][16][D]
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = g + 8 * r;
        if (t == 0) {
            sm_m[warp][row] = row_max[r];
            sm_l[warp][row] = l;
        }
        float* dst = sm_acc + (warp * kTcHeads + row) * D + 2 * t;
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
            dst[dt * 8] = acc[dt][2 * r];
            dst[dt * 8 + 1] = acc[dt][2 * r + 1];
        }
    }
    __syncthreads();
    for (int i = tid; i < nh * D; i += kThreads) {
        const int h = i / D, d = i % D;
        float mx = PGK_NEG_INF;
#pragma unroll
        for (int w = 0; w < 4; ++w) mx = max_nan(mx, sm_m[w][h]);
        float sum = 0.f, o = 0.f;
        if (mx != PGK_NEG_INF) {
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const float wt = fast_exp2(sm_m[w][h] - mx);  // 0 for a warp that saw no token
                sum += sm_l[w][h] * wt;
                o += sm_acc[(w * kTcHeads + h) * D + d] * wt;
            }
        }
        const float val = sum != 0.f ? o / sum : 0.f;
        const size_t row = (size_t)b * hq + h0 + h;
        if (gridDim.x == 1) {
            out[row * D + d] = static_cast<T>(val);
        } else {
            o_part[(row * gridDim.x + split) * D + d] = val;
            if (d == 0) lse[row * gridDim.x + split] = sum != 0.f ? mx + __log2f(sum) : PGK_NEG_INF;
        }
    }
    if (gridDim.x > 1 && counters != nullptr)
        merge_if_last<T>(o_part, lse, counters, out, (size_t)b * hq + h0, nh, D,
                         max(1, min((int)gridDim.x, (len + chunk - 1) / chunk)), sm_acc);
}

}  // namespace

// Entry points per dtype and head dim: attn_decode_d<D>_<dtype> (SIMT),
// attn_decode_mma_d<D>_<dtype> and attn_decode_mma2_d<D>_<dtype> (tensor cores, one and two K/V
// stages), attn_decode_bulk2_d<D>_<dtype> and attn_decode_bulk3_d<D>_<dtype> (two and three
// stages filled by bulk copies, SM 9.0+), attn_decode_tma2_d<D>_<dtype> and
// attn_decode_tma3_d<D>_<dtype> (filled by tensor copies, SM 9.0+, D 64, 128 and 256: two more
// parameters, the K and V caches' tensor maps); and the split combiner
// attn_decode_combine_<dtype>.
#define PGK_DECODE_CALL                                                                         \
    q, k_cache, v_cache, seq_lens, block_table, out, o_part, lse, counters, hq, hkv, cache_len, \
        max_blocks, capacity, chunk, scale, early
#define PGK_DECODE_PARAMS(T)                                                                      \
    (const T* q, const T* k_cache, const T* v_cache, const int* seq_lens, const int* block_table, \
     T* out, float* o_part, float* lse, unsigned* counters, int hq, int hkv, int cache_len,       \
     int max_blocks, int capacity, int chunk, float scale, int early)
#define PGK_DECODE(sfx, T, D)                                                           \
    PGK_KERNEL_BOUNDS(attn_decode_d##D##_##sfx, PGK_DECODE_PARAMS(T), kThreads) {       \
        attn_decode<T, D>(PGK_DECODE_CALL);                                             \
    }                                                                                   \
    PGK_KERNEL_BOUNDS(attn_decode_mma_d##D##_##sfx, PGK_DECODE_PARAMS(T), kThreads) {   \
        attn_decode_mma<T, D>(PGK_DECODE_CALL);                                         \
    }                                                                                   \
    PGK_KERNEL_BOUNDS(attn_decode_mma2_d##D##_##sfx, PGK_DECODE_PARAMS(T), kThreads) {  \
        attn_decode_mma<T, D, 2>(PGK_DECODE_CALL);                                      \
    }                                                                                   \
    PGK_KERNEL_BOUNDS(attn_decode_bulk2_d##D##_##sfx, PGK_DECODE_PARAMS(T), kThreads) { \
        attn_decode_mma<T, D, 2, true>(PGK_DECODE_CALL);                                \
    }                                                                                   \
    PGK_KERNEL_BOUNDS(attn_decode_bulk3_d##D##_##sfx, PGK_DECODE_PARAMS(T), kThreads) { \
        attn_decode_mma<T, D, 3, true>(PGK_DECODE_CALL);                                \
    }
// The tensor-copy kernels, for the head dims that are whole 64-value column blocks.
#define PGK_DECODE_TILES(sfx, T, D)                                                        \
    PGK_KERNEL_BOUNDS(attn_decode_tma2_d##D##_##sfx, PGK_DECODE_TMA_PARAMS(T), kThreads) { \
        attn_decode_mma<T, D, 2, true, true>(PGK_DECODE_CALL, &k_map, &v_map);             \
    }                                                                                      \
    PGK_KERNEL_BOUNDS(attn_decode_tma3_d##D##_##sfx, PGK_DECODE_TMA_PARAMS(T), kThreads) { \
        attn_decode_mma<T, D, 3, true, true>(PGK_DECODE_CALL, &k_map, &v_map);             \
    }
#define PGK_DECODE_TMA_PARAMS(T)                                                                  \
    (const T* q, const T* k_cache, const T* v_cache, const int* seq_lens, const int* block_table, \
     T* out, float* o_part, float* lse, unsigned* counters, int hq, int hkv, int cache_len,       \
     int max_blocks, int capacity, int chunk, float scale, int early,                             \
     const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map)
#define PGK_DECODE_FAMILY(sfx, T)                                                                \
    PGK_ATTN_HEAD_DIMS(PGK_DECODE, sfx, T)                                                       \
    PGK_DECODE_TILES(sfx, T, 64)                                                                 \
    PGK_DECODE_TILES(sfx, T, 128)                                                                \
    PGK_DECODE_TILES(sfx, T, 256)                                                                \
    PGK_KERNEL(attn_decode_combine_##sfx,                                                        \
               (const float* o_part, const float* lse, const int* seq_lens, T* out, int hq,      \
                int d_head, int splits, int chunk, int capacity)) {                              \
        attn_decode_combine<T>(o_part, lse, seq_lens, out, hq, d_head, splits, chunk, capacity); \
    }
PGK_HALF_TYPES(PGK_DECODE_FAMILY)

// Launch geometry the host side plans with (KernelLibrary.constant("attention_decode", NAME)).
PGK_CONSTANT(DECODE_THREADS, kThreads);
PGK_CONSTANT(DECODE_SIMT_HEADS, kG);       // query heads per CTA, SIMT kernel
PGK_CONSTANT(DECODE_MMA_HEADS, kTcHeads);  // query heads per CTA, tensor-core kernels
PGK_CONSTANT(DECODE_KEY_TILE, kTcTile);    // keys per step of the tensor-core kernels
PGK_CONSTANT(DECODE_MAX_SPLITS, kMaxSplits);
