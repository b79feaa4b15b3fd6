// Skinny-M linear on tensor cores (host side: ops/skinny_linear.py): y = x @ w^T (+ bias) for
// x [M, K] with few rows (M <= 64: the tokens of a batched decode step) and w [N, K] row-major,
// the layout the models store. At such M the product is bound by reading w once; the kernel is
// built to keep DRAM busy with w's bytes and nothing else.
//
//   skinny_gemm_n<NT>_s<S>_<dtype>(x, w, bias, y, M, N, K, f32out)
//       grid (ceil(N / kTileN), S), kThreads threads, dynamic shared memory NT * 8 KiB
//
// The weight is the wide operand: a CTA owns kTileN = 128 weight rows (16 per warp, the A
// operand of mma.sync m16n8k16) and NT tiles of 8 tokens (the B operand; tokens past M are
// zeros). Each lane streams its weight bytes straight into registers (16-byte loads that skip
// L1, one block of 128 k ahead of the math), where they already are A fragments: the sum over
// k does not care which k an mma step covers, so lane (g = lane / 4, q = lane % 4) loads the
// 16-byte pieces 4 u + q (u = 0..3) of rows g and g + 8 of each 128-k block, and the element
// pairs (0,1), (2,3) of a piece feed one mma's k pairs (2q, 2q+1), (2q+8, 2q+9), the pairs
// (4,5), (6,7) the next mma's. The x rows take the same permutation: lane (g, q) reads the
// same pieces of token row g of each token tile. A warp's load instruction covers 64
// contiguous bytes of 8 rows; its four cover 256 bytes of 16 rows.
//
// x is staged in shared memory, 256 k at a time for all of the CTA's tokens (cp.async, two
// buffers: the next chunk lands while this one is used), so each x byte comes from L2 once per
// CTA rather than once per warp. Piece p of token row n is stored at p ^ ((n & 1) << 2): the
// eight lanes of a 16-byte shared load phase (two rows, four pieces each) hit distinct banks.
//
// Split K: where N has too few 128-row tiles to fill the GPU, S CTAs (a thread block cluster,
// 1 x S x 1) share a tile, each summing a contiguous range of the 256-k chunks. They meet in
// distributed shared memory: each leaves its fp32 partial tile [kTileN][NT * 8] in its shared
// memory, and CTA r of the cluster adds the S partials of rows [r * kTileN / S, ...) in cluster
// rank order and stores them, so results do not depend on timing (the same bits on every run).
// Clusters need sm_90: on older GPUs only S = 1 runs (the host plans it so).
//
// Epilogue: + bias (in fp32), then one rounding to T, or float32 unrounded when f32out.
#include "linear_epilogue.cuh"
#include "pygpukit/kernel.cuh"

using pygpukit_linear::load_stream_now;
using pygpukit_linear::narrow;
using pygpukit_linear::widen;

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileN = kWarps * 16;   // weight rows per CTA
constexpr int kBlockK = 128;          // k per weight block (a lane's 4 pieces of 2 rows)
constexpr int kChunkK = 2 * kBlockK;  // k per staged x chunk
constexpr int kChunkPieces = kChunkK / 8;
constexpr int kRowBytes = kChunkPieces * 16;  // one token row of a staged chunk

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PGK_SKINNY_CLUSTERS 1
#else
#define PGK_SKINNY_CLUSTERS 0
#endif

// D += A B, m16n8k16, fp32 accumulators (A: 4 registers of packed pairs, B: 2).
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                    unsigned a3, unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&d)[4], unsigned a0, unsigned a1,
                                                   unsigned a2, unsigned a3, unsigned b0,
                                                   unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__half>(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                            unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Chunk c of x (all NT * 8 token rows, 256 k) into buf, zeros past M and past K. Thread i
// stages piece i % 32 of rows i / 32 + 8 j: one piece index, one row stride.
template <typename T, int NT>
__device__ __forceinline__ void stage_x(const T* __restrict__ x, unsigned char* buf, int c, int M,
                                        int K) {
    const int n0 = threadIdx.x / kChunkPieces, p = threadIdx.x % kChunkPieces;
    const int gp = c * kChunkPieces + p;
    const bool in_k = gp < (K >> 3);
    const T* src = x + (size_t)n0 * K + (size_t)gp * 8;
    unsigned char* dst = buf + n0 * kRowBytes + ((p ^ ((n0 & 1) << 2)) << 4);
    constexpr int kRowsPerPass = kThreads / kChunkPieces;
#pragma unroll
    for (int j = 0; j < NT * 8 / kRowsPerPass; ++j) {
        const bool valid = in_k && n0 + j * kRowsPerPass < M;
        cp_async16(dst + j * kRowsPerPass * kRowBytes,
                   valid ? src + (size_t)j * kRowsPerPass * K : x, valid);
    }
    cp_async_commit();
}

// Weight block kb (128 k) of this lane's rows: pieces 16 kb + 4 u + q; zeros past K.
__device__ __forceinline__ void load_w(const uint4* __restrict__ lo_row,
                                       const uint4* __restrict__ hi_row, int kb, int q, int pieces,
                                       uint4 (&lo)[4], uint4 (&hi)[4]) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int p = kb * 16 + 4 * u + q;
        const bool in = p < pieces;
        lo[u] = in ? load_stream_now(lo_row + p) : make_uint4(0, 0, 0, 0);
        hi[u] = in ? load_stream_now(hi_row + p) : make_uint4(0, 0, 0, 0);
    }
}

// The products of one weight block (half b of the staged chunk xs) into acc.
template <typename T, int NT>
__device__ __forceinline__ void block_mma(const uint4 (&lo)[4], const uint4 (&hi)[4],
                                          const unsigned char* xs, int b, int g, int q,
                                          float (&acc)[NT][4]) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const int p = b * 16 + 4 * u + q;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int n = nt * 8 + g;
            const uint4 xv =
                *reinterpret_cast<const uint4*>(xs + n * kRowBytes + ((p ^ ((n & 1) << 2)) << 4));
            mma<T>(acc[nt], lo[u].x, hi[u].x, lo[u].y, hi[u].y, xv.x, xv.y);
            mma<T>(acc[nt], lo[u].z, hi[u].z, lo[u].w, hi[u].w, xv.z, xv.w);
        }
    }
}

// Output (token t, row) = v + b (b: the row's bias, or 0), rounded once to T or float32.
template <typename T>
__device__ __forceinline__ void store_out(void* y, int t, int row, float v, float b, int M, int N,
                                          int f32out) {
    if (t >= M || row >= N) return;
    const size_t at = (size_t)t * N + row;
    if (f32out)
        static_cast<float*>(y)[at] = v + b;
    else
        static_cast<T*>(y)[at] = narrow<T>(v + b);
}

template <typename T>
__device__ __forceinline__ float bias_at(const T* __restrict__ bias, int row, int N) {
    return bias != nullptr && row < N ? widen(bias[row]) : 0.0f;
}

#if PGK_SKINNY_CLUSTERS
__device__ __forceinline__ void cluster_sync() {
    asm volatile(
        "barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
            : "memory");
}
// The float at local shared address p in the shared memory of cluster CTA rank.
__device__ __forceinline__ float cluster_load(const float* p, int rank) {
    unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p)), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}
#endif

template <typename T, int NT, int S>
__device__ __forceinline__ void skinny_gemm(const T* __restrict__ x, const T* __restrict__ w,
                                            const T* __restrict__ bias, void* y, int M, int N,
                                            int K, int f32out) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int kBufBytes = NT * 8 * kRowBytes;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int tile0 = blockIdx.x * kTileN;
    const int rlo = tile0 + warp * 16 + g, rhi = rlo + 8;
    // Rows past N re-read the last row; their sums are dropped.
    const uint4* wlo = reinterpret_cast<const uint4*>(w + (size_t)min(rlo, N - 1) * K);
    const uint4* whi = reinterpret_cast<const uint4*>(w + (size_t)min(rhi, N - 1) * K);
    const int pieces = K >> 3;
    const int chunks = (K + kChunkK - 1) / kChunkK;
    const int split = S > 1 ? static_cast<int>(blockIdx.y) : 0;
    const int c0 = split * chunks / S, c1 = (split + 1) * chunks / S;

    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

    if (c0 < c1) {
        stage_x<T, NT>(x, smem, c0, M, K);
        uint4 lo[4], hi[4];
        load_w(wlo, whi, 2 * c0, q, pieces, lo, hi);
        for (int c = c0; c < c1; ++c) {
            const unsigned char* xs = smem + ((c - c0) & 1) * kBufBytes;
            if (c + 1 < c1) {
                stage_x<T, NT>(x, smem + ((c + 1 - c0) & 1) * kBufBytes, c + 1, M, K);
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                // The next block's weights fly while this block's products run.
                uint4 nlo[4], nhi[4];
                const int next = b == 0 ? 2 * c + 1 : (c + 1 < c1 ? 2 * c + 2 : -1);
                if (next >= 0) {
                    load_w(wlo, whi, next, q, pieces, nlo, nhi);
                } else {
#pragma unroll
                    for (int u = 0; u < 4; ++u) nlo[u] = nhi[u] = make_uint4(0, 0, 0, 0);
                }
                block_mma<T, NT>(lo, hi, xs, b, g, q, acc);
#pragma unroll
                for (int u = 0; u < 4; ++u) lo[u] = nlo[u], hi[u] = nhi[u];
            }
            __syncthreads();  // the buffer is staged again two chunks on
        }
    }

    // Accumulators: acc[nt][0..1] = (row rlo, tokens nt * 8 + 2q, + 1), [2..3] = (row rhi, same).
    if constexpr (S == 1) {
        const float blo = bias_at(bias, rlo, N), bhi = bias_at(bias, rhi, N);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int t = nt * 8 + 2 * q;
            store_out<T>(y, t, rlo, acc[nt][0], blo, M, N, f32out);
            store_out<T>(y, t + 1, rlo, acc[nt][1], blo, M, N, f32out);
            store_out<T>(y, t, rhi, acc[nt][2], bhi, M, N, f32out);
            store_out<T>(y, t + 1, rhi, acc[nt][3], bhi, M, N, f32out);
        }
    } else {
#if PGK_SKINNY_CLUSTERS
        constexpr int kTokens = NT * 8;
        float* part = reinterpret_cast<float*>(smem);  // [kTileN][kTokens], reusing the x buffers
        const int llo = warp * 16 + g;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int t = nt * 8 + 2 * q;
            part[llo * kTokens + t] = acc[nt][0];
            part[llo * kTokens + t + 1] = acc[nt][1];
            part[(llo + 8) * kTokens + t] = acc[nt][2];
            part[(llo + 8) * kTokens + t + 1] = acc[nt][3];
        }
        cluster_sync();
        constexpr int kRowsEach = kTileN / S;
        const int rank = static_cast<int>(blockIdx.y);  // the cluster spans the grid's y
        for (int e = threadIdx.x; e < kRowsEach * kTokens; e += kThreads) {
            const int r = rank * kRowsEach + e % kRowsEach, t = e / kRowsEach;
            if (t >= M) break;  // t grows with e
            float v = 0.0f;
#pragma unroll
            for (int j = 0; j < S; ++j) v += cluster_load(part + r * kTokens + t, j);
            store_out<T>(y, t, tile0 + r, v, bias_at(bias, tile0 + r, N), M, N, f32out);
        }
        cluster_sync();  // no CTA leaves while another reads its shared memory
#else
        __trap();  // split K needs clusters (sm_90); the host plans S = 1 elsewhere
#endif
    }
}

}  // namespace

#if PGK_SKINNY_CLUSTERS
#define PGK_SKINNY_CLUSTER_DIMS(S) __cluster_dims__(1, S, 1)
#else
#define PGK_SKINNY_CLUSTER_DIMS(S)
#endif

#define PGK_SKINNY_GEMM(NT, S, sfx, T)                                                     \
    PGK_KERNEL_WITH_(                                                                      \
        skinny_gemm_n##NT##_s##S##_##sfx,                                                  \
        (const T* x, const T* w, const T* bias, void* y, int M, int N, int K, int f32out), \
        __launch_bounds__(kThreads, 2) PGK_SKINNY_CLUSTER_DIMS(S)) {                       \
        skinny_gemm<T, NT, S>(x, w, bias, y, M, N, K, f32out);                             \
    }
#define PGK_SKINNY_GEMM_S(NT, sfx, T) \
    PGK_SKINNY_GEMM(NT, 1, sfx, T)    \
    PGK_SKINNY_GEMM(NT, 2, sfx, T) PGK_SKINNY_GEMM(NT, 4, sfx, T) PGK_SKINNY_GEMM(NT, 8, sfx, T)
#define PGK_SKINNY_GEMM_ALL(sfx, T) \
    PGK_SKINNY_GEMM_S(1, sfx, T)    \
    PGK_SKINNY_GEMM_S(2, sfx, T) PGK_SKINNY_GEMM_S(4, sfx, T) PGK_SKINNY_GEMM_S(8, sfx, T)
PGK_HALF_TYPES(PGK_SKINNY_GEMM_ALL)

// Launch geometry the host side plans with.
PGK_CONSTANT(SKINNY_THREADS, kThreads);
PGK_CONSTANT(SKINNY_TILE_N, kTileN);
PGK_CONSTANT(SKINNY_CHUNK_K, kChunkK);
PGK_CONSTANT(SKINNY_MAX_ROWS, 64);                      // NT <= 8 token tiles of 8
PGK_CONSTANT(SKINNY_SMEM_PER_TILE, 8 * kRowBytes * 2);  // bytes of shared memory per token tile
PGK_CONSTANT(SKINNY_MAX_SPLITS, 8);
