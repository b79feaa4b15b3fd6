// Flash attention forward (prefill) on tensor cores with mma.sync m16n8k16 (SM 80+):
//   attn_prefill_d<D>_<f16|bf16>(q, k, v, o, mask, ...), D in {64, 80, 96, 128, 256}.
// Layout: q/o [B, Hq, Sq, D], k/v [B, Hkv, Sk, D], all contiguous (o_seq = 1: o is [B, Sq, Hq,
// D] instead, the layout an output projection reads); query head h reads KV head
// h / (Hq / Hkv) (GQA/MQA). One CTA of 4 warps owns kBM query rows of one (batch, head), each
// warp kBM / 4 rows (see Config); it walks the key tiles of kBN keys with an online softmax,
// so the score matrix only ever exists as a kBM / 4 x kBN register tile per warp.
//   Pipeline (one K and one V buffer): while S = Q K_j^T and its softmax run, V_j streams in;
//   while O += P V_j runs, K_{j+1} streams in (cp.async, zero-filled past the end of the
//   sequence, so padded rows hold zeros rather than stale data that could be NaN).
//   Shared rows are padded by 16 bytes: the 8 row addresses of every ldmatrix then fall in 8
//   distinct 16-byte bank groups for all five head dims, with no swizzle to compute.
//   Softmax in base 2: scores are scaled by scale * log2(e) once, exp2 replaces exp.
//   Q fragments stay in registers when they fit (D = 64); otherwise they are re-read from
//   shared memory each tile (in registers they would push the kernel past 255 registers).
// Masking: keys >= Sk; causal keys j > i + (Sk - Sq) (bottom-right aligned, PyTorch's rule
// when Sq == Sk); an optional additive mask (fp32, or the input dtype: mask_kind 1 / 2) read
// through element strides, 0 on broadcast dimensions. Rows with no visible key output 0.
// Grid: 1-d, B * Hq * query tiles, in PrefillOrder (attention_common.cuh): longest causal tiles
// first within groups of heads.
#include "attention_common.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_attn;

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

// kMT: 16-row m-tiles per warp. Two (FA2's 128-row blocks) for D <= 128: every K and V
// fragment read from shared memory then feeds two mma instead of one, halving ldmatrix traffic
// per mma; D = 256 keeps one (its accumulators alone fill 128 registers).
template <int D>
struct Config {
    static constexpr int kMT = D <= 128 ? 2 : 1;
    static constexpr int kBM = kWarps * 16 * kMT;  // query rows per CTA
    static constexpr int kBN = D > 80 ? 32 : 64;   // keys per tile (64: spills at D >= 96)
    static constexpr bool kQInRegs = kMT * D <= 128;
    static constexpr int kStride = D + 8;  // elements per shared row (16-byte pad)
};

template <typename T, int D>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int rows, int valid_rows) {
    constexpr int kChunks = D / 8;  // 16-byte chunks per row
    constexpr int kStride = Config<D>::kStride;
    for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
        const int r = i / kChunks, c = i % kChunks;
        const bool valid = r < valid_rows;
        cp_async16(dst + r * kStride + c * 8, valid ? src + (size_t)r * D + c * 8 : src, valid);
    }
}

template <typename T, int D>
__device__ __forceinline__ void attn_prefill(const T* __restrict__ q, const T* __restrict__ k,
                                             const T* __restrict__ v, T* __restrict__ o,
                                             const void* __restrict__ mask, int mask_kind,
                                             long long msb, long long msh, long long msq,
                                             long long msk, int hq, int hkv, int sq, int sk,
                                             float scale, int causal, int o_seq) {
    using C = Config<D>;
    constexpr int kMT = C::kMT, kBM = C::kBM, kBN = C::kBN, kS = C::kStride;
    constexpr int kKT = D / 16;   // k-steps of S = Q K^T
    constexpr int kNT = kBN / 8;  // n8 tiles of S
    constexpr int kDT = D / 8;    // n8 tiles of O
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sQ = reinterpret_cast<T*>(smem_raw);
    T* sK = sQ + kBM * kS;
    T* sV = sK + kBN * kS;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const PrefillOrder order(sq, kBM, hq);
    const int m0 = order.m0, h = order.h, b = order.b;
    const int hk = h / (hq / hkv);
    const int diag = sk - sq;  // key j is visible to query i when j <= i + diag (causal)

    const T* qp = q + ((size_t)b * hq + h) * sq * D + (size_t)m0 * D;
    const T* kp = k + ((size_t)b * hkv + hk) * sk * D;
    const T* vp = v + ((size_t)b * hkv + hk) * sk * D;
    const size_t o_row = o_seq ? (size_t)hq * D : (size_t)D;  // [B, Sq, Hq, D] or [B, Hq, Sq, D]
    T* op = o_seq ? o + ((size_t)b * sq + m0) * hq * D + (size_t)h * D
                  : o + ((size_t)b * hq + h) * sq * D + (size_t)m0 * D;
    const int rows_here = min(kBM, sq - m0);

    const int n_end = causal ? min(sk, m0 + kBM + diag) : sk;
    const int n_tiles = n_end > 0 ? (n_end + kBN - 1) / kBN : 0;
    // m-tile mt of this warp holds tile rows wrow + mt * 16 + [0, 16); this thread's rows are
    // wrow + mt * 16 + g and + 8.
    const int wrow = warp * 16 * kMT;

    float acc[kMT][kDT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int i = 0; i < kDT; ++i)
            acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.f;
    float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
        row_max[mt][0] = row_max[mt][1] = PGK_NEG_INF;
        row_sum[mt][0] = row_sum[mt][1] = 0.f;
    }

    if (n_tiles > 0) {
        load_tile<T, D>(sQ, qp, kBM, rows_here);
        load_tile<T, D>(sK, kp, kBN, min(kBN, sk));
        cp_async_commit();
        cp_async_wait_all();
        __syncthreads();
    }
    unsigned qf[C::kQInRegs ? kMT : 1][C::kQInRegs ? kKT : 1][4];
    if constexpr (C::kQInRegs) {
        if (n_tiles > 0) {
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
                for (int kk = 0; kk < kKT; ++kk)
                    ldmatrix_x4(qf[mt][kk], sQ + (wrow + mt * 16 + (lane & 15)) * kS + kk * 16 +
                                                (lane >> 4) * 8);
        }
    }
    const float scale2 = scale * kLog2e;

    for (int j = 0; j < n_tiles; ++j) {
        const int n0 = j * kBN;
        load_tile<T, D>(sV, vp + (size_t)n0 * D, kBN, min(kBN, sk - n0));
        cp_async_commit();

        float s[kMT][kNT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int i = 0; i < kNT; ++i)
                s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk) {
            unsigned a[kMT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
                if constexpr (C::kQInRegs) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) a[mt][i] = qf[mt][kk][i];
                } else {
                    ldmatrix_x4(a[mt], sQ + (wrow + mt * 16 + (lane & 15)) * kS + kk * 16 +
                                           (lane >> 4) * 8);
                }
            }
#pragma unroll
            for (int nn = 0; nn < kNT / 2; ++nn) {
                unsigned bk[4];
                ldmatrix_x4(bk, sK + (nn * 16 + (lane >> 4) * 8 + (lane & 7)) * kS + kk * 16 +
                                    ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt) {
                    mma16816<T>(s[mt][2 * nn], a[mt], bk[0], bk[1]);
                    mma16816<T>(s[mt][2 * nn + 1], a[mt], bk[2], bk[3]);
                }
            }
        }

        // Scale into base 2; mask only the tiles that need it (edge, diagonal, explicit mask).
        const bool edge = n0 + kBN > sk || (causal && n0 + kBN - 1 > m0 + diag) || mask_kind;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[mt][nt][e] * scale2;
                    if (edge) {
                        const int row = m0 + wrow + mt * 16 + g + (e >> 1) * 8;
                        const int col = n0 + nt * 8 + 2 * t + (e & 1);
                        if (mask_kind && row < sq && col < sk) {
                            const long long idx = b * msb + h * msh + row * msq + col * msk;
                            const float mv = mask_kind == 1
                                                 ? static_cast<const float*>(mask)[idx]
                                                 : widen(static_cast<const T*>(mask)[idx]);
                            x += mv * kLog2e;
                        }
                        if (col >= sk || (causal && col > row + diag)) x = PGK_NEG_INF;
                    }
                    s[mt][nt][e] = x;
                }
            }
        }

        // Online softmax: per m-tile, rows g (e = 0, 1) and g + 8 (e = 2, 3), each spread over
        // a quad of lanes.
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = row_max[mt][r];
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
                    mx = max_nan(mx, max_nan(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // A row that has seen no visible key yet keeps max -inf: subtract 0 instead, so
                // exp2(-inf - (-inf)) never makes a NaN.
                const float ref = mx == PGK_NEG_INF ? 0.f : mx;
                const float alpha = fast_exp2(row_max[mt][r] - ref);
                row_max[mt][r] = mx;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt) {
                    s[mt][nt][2 * r] = fast_exp2(s[mt][nt][2 * r] - ref);
                    s[mt][nt][2 * r + 1] = fast_exp2(s[mt][nt][2 * r + 1] - ref);
                    sum += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
                }
                // This thread's share of the row sum; the quad adds them up at the end.
                row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
#pragma unroll
                for (int dt = 0; dt < kDT; ++dt) {
                    acc[mt][dt][2 * r] *= alpha;
                    acc[mt][dt][2 * r + 1] *= alpha;
                }
            }
        }

        cp_async_wait_all();  // V_j has landed
        __syncthreads();      // ... for every thread, and nobody reads K_j any more
        if (j + 1 < n_tiles) {
            load_tile<T, D>(sK, kp + (size_t)(n0 + kBN) * D, kBN, min(kBN, sk - n0 - kBN));
            cp_async_commit();
        }

        // O += P V_j: the S accumulators of two n8 tiles are exactly one A fragment of P.
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
            unsigned pa[kMT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
                pa[mt][0] = Half2<T>::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = Half2<T>::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = Half2<T>::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = Half2<T>::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dn = 0; dn < D / 16; ++dn) {
                unsigned bv[4];
                ldmatrix_x4_trans(bv, sV + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kS +
                                          dn * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt) {
                    mma16816<T>(acc[mt][2 * dn], pa[mt], bv[0], bv[1]);
                    mma16816<T>(acc[mt][2 * dn + 1], pa[mt], bv[2], bv[3]);
                }
            }
        }
        cp_async_wait_all();  // K_{j+1} has landed
        __syncthreads();      // ... and nobody reads V_j any more
    }

#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = row_sum[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l != 0.f ? 1.f / l : 0.f;
            const int row = wrow + mt * 16 + g + r * 8;
            if (row < rows_here) {
                unsigned* dst = reinterpret_cast<unsigned*>(op + row * o_row + 2 * t);
#pragma unroll
                for (int dt = 0; dt < kDT; ++dt)
                    dst[dt * 4] =
                        Half2<T>::pack(acc[mt][dt][2 * r] * inv, acc[mt][dt][2 * r + 1] * inv);
            }
        }
    }
}

}  // namespace

// Entry points: attn_prefill_d<D>_<dtype> (mma.sync, any SM). Dynamic shared memory:
// (kBM + 2 * kBN) * (D + 8) * 2 bytes with Config's kBM and kBN (the PREFILL_* constants below).
#define PGK_PREFILL_CALL \
    q, k, v, o, mask, mask_kind, msb, msh, msq, msk, hq, hkv, sq, sk, scale, causal, o_seq
#define PGK_PREFILL_PARAMS(T, ...)                                                              \
    (const T* q, const T* k, const T* v, T* o, const void* mask, int mask_kind, long long msb,  \
     long long msh, long long msq, long long msk, int hq, int hkv, int sq, int sk, float scale, \
     int causal, int o_seq __VA_ARGS__)
#define PGK_PREFILL(sfx, T, D)                                                      \
    PGK_KERNEL_BOUNDS(attn_prefill_d##D##_##sfx, PGK_PREFILL_PARAMS(T), kThreads) { \
        attn_prefill<T, D>(PGK_PREFILL_CALL);                                       \
    }
#define PGK_PREFILL_FAMILY(sfx, T) PGK_ATTN_HEAD_DIMS(PGK_PREFILL, sfx, T)
PGK_HALF_TYPES(PGK_PREFILL_FAMILY)

// Hopper: wgmma kernels for head dims 64 and 128, the same arguments as above; dynamic shared
// memory 7 * D / 64 * 16 KiB + 1 KiB for alignment. Elsewhere the entry points trap: the host
// launches them only on SM 9.0. attn_prefill_wgmma_pipe_* (attention_prefill_sm90.cuh):
// each warpgroup overlaps its softmax with its own P V.
#include "attention_prefill_sm90.cuh"

constexpr int kWgmmaPipeThreads = 256, kWgmmaTmaThreads = 384;
#ifdef PGK_ATTN_HAS_WGMMA
#define PGK_WGMMA_ONLY(...) __VA_ARGS__
#else
#define PGK_WGMMA_ONLY(...) __trap()
#endif

// attn_prefill_wgmma_tma_* (attention_prefill_sm90_tma.cuh): warp-specialized, one producer
// thread loading Q, K and V by TMA and two consumer warpgroups taking turns at the tensor cores
// (ping-pong); tq, tk and tv are gp.TensorMap of q, k and v viewed as [B * H, S, D], boxes of
// 128 x 64 with a 128-byte swizzle (attention.py _tma_maps).
#include "attention_prefill_sm90_tma.cuh"

// attn_prefill_wgmma_persist_* (attention_prefill_sm90_persist.cuh): the same warp-specialized
// kernel made persistent, at most one CTA per SM, each running the list of query tiles that
// `sched` gives it (attention.py _prefill_schedule); the producer loads the next tile's Q and
// K/V while the consumers finish the current one.
#include "attention_prefill_sm90_persist.cuh"

#define PGK_PREFILL_WGMMA(sfx, T, D)                                                         \
    PGK_KERNEL_BOUNDS(attn_prefill_wgmma_pipe_d##D##_##sfx, PGK_PREFILL_PARAMS(T),           \
                      kWgmmaPipeThreads, 1) {                                                \
        PGK_WGMMA_ONLY(pgk_attn_sm90::attn_prefill_wgmma_pipe<T, D>(PGK_PREFILL_CALL));      \
    }                                                                                        \
    PGK_KERNEL_BOUNDS(attn_prefill_wgmma_tma_d##D##_##sfx,                                   \
                      PGK_PREFILL_PARAMS(T, , const __grid_constant__ CUtensorMap tq,        \
                                         const __grid_constant__ CUtensorMap tk,             \
                                         const __grid_constant__ CUtensorMap tv),            \
                      kWgmmaTmaThreads, 1) {                                                 \
        PGK_WGMMA_ONLY(const pgk_attn_sm90::TmaMaps maps{&tq, &tk, &tv};                     \
                       pgk_attn_sm90::attn_prefill_wgmma_tma<T, D>(PGK_PREFILL_CALL, maps)); \
    }                                                                                        \
    PGK_KERNEL_BOUNDS(                                                                       \
        attn_prefill_wgmma_persist_d##D##_##sfx,                                             \
        PGK_PREFILL_PARAMS(T, , const __grid_constant__ CUtensorMap tq,                      \
                           const __grid_constant__ CUtensorMap tk,                           \
                           const __grid_constant__ CUtensorMap tv, const int* sched),        \
        kWgmmaTmaThreads, 1) {                                                               \
        PGK_WGMMA_ONLY(                                                                      \
            const pgk_attn_sm90::TmaMaps maps{&tq, &tk, &tv};                                \
            pgk_attn_sm90::attn_prefill_wgmma_persist<T, D>(PGK_PREFILL_CALL, maps, sched)); \
    }
#define PGK_PREFILL_WGMMA_FAMILY(sfx, T) \
    PGK_PREFILL_WGMMA(sfx, T, 64) PGK_PREFILL_WGMMA(sfx, T, 128)
PGK_HALF_TYPES(PGK_PREFILL_WGMMA_FAMILY)

// Launch geometry the host side plans with (KernelLibrary.constant("attention_prefill", NAME)):
// the mma kernel's threads, and per head dim its query rows per CTA, keys per tile and shared
// row stride (elements); the Hopper kernels' threads.
PGK_CONSTANT(PREFILL_THREADS, kThreads);
PGK_CONSTANT(PREFILL_WGMMA_PIPE_THREADS, kWgmmaPipeThreads);
PGK_CONSTANT(PREFILL_WGMMA_TMA_THREADS, kWgmmaTmaThreads);
PGK_CONSTANT(PREFILL_WGMMA_PERSIST_THREADS, kWgmmaTmaThreads);
#define PGK_PREFILL_CONFIG(D)                        \
    PGK_CONSTANT(PREFILL_ROWS_D##D, Config<D>::kBM); \
    PGK_CONSTANT(PREFILL_KEYS_D##D, Config<D>::kBN); \
    PGK_CONSTANT(PREFILL_STRIDE_D##D, Config<D>::kStride)
PGK_PREFILL_CONFIG(64);
PGK_PREFILL_CONFIG(80);
PGK_PREFILL_CONFIG(96);
PGK_PREFILL_CONFIG(128);
PGK_PREFILL_CONFIG(256);
