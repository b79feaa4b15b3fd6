// GEMV / skinny GEMM for linear layers: y[M, N] = act(x[M, K] @ W[N, K]^T + bias), M <= 8.
//
// Memory-bandwidth bound: W (N*K elements) is streamed from DRAM exactly once, so the kernel is
// built to keep many bytes in flight. Each warp owns kRows consecutive output rows; every lane
// issues kRows * kUnroll independent 16-byte loads of W per iteration (ld.global.nc with
// L1::no_allocate, so the stream does not evict x from L1) before doing any math, and each x chunk
// (read through the read-only cache, it is tiny and shared by all warps) is reused for the kRows
// rows, while each W chunk is reused for all M rows of x. Lanes cover a row in 512-byte coalesced
// strips; partial sums (fp32) are combined with warp shuffles, and the epilogue adds the bias,
// applies the activation and rounds once to the storage type.
//
// The vector kernels need K % 8 == 0 and 16-byte aligned x and W (rows then stay aligned); the
// scalar kernels (gemv_scalar_*) handle everything else, at a fraction of the bandwidth.
//
// Two vector kernels; linear.py picks one per M (PYGPUKIT_GEMV_VARIANT overrides it):
//   simt (gemv_<dtype>_m<M>, M a template argument): kRows = 4 rows per warp, kUnroll = 2 chunks
//        per row per lane, FMAs on the SIMT cores; x is reused for 4 rows. The faster one at
//        M = 1.
//   mma  (gemv_mma_<dtype>, runtime M): 16 rows per block, K split over its 4 warps, products on
//        tensor cores (see gemv_mma), so M = 8 costs no more issue slots than M = 1, where the
//        SIMT kernel's FMAs grow with M.
// docs/ops-linear-sampling.md has the measurements and the layouts that lost to these two.
#include "linear_epilogue.cuh"
#include "pygpukit/kernel.cuh"

using namespace pygpukit_linear;

namespace {

// Warps per block. Small blocks spread evenly: N = 14336 gives 896 blocks, 6.8 per SM on 132
// SMs (the busiest SM does 3% more than average; 8-warp blocks: 3.4 per SM, 18% more).
constexpr int kWarps = 4;

template <typename T>
__device__ __forceinline__ float dot8(const float (&xf)[8], const uint4& w, float acc) {
    float wf[8];
    unpack8<T>(w, wf);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(xf[i], wf[i], acc);
    return acc;
}

// kRows output rows per warp, kUnroll 16-byte chunks per row in flight per lane (kRows * kUnroll
// loads before any math).
template <typename T, typename To, int M, int kRows, int kUnroll>
__device__ __forceinline__ void gemv_vec(const T* __restrict__ x, const T* __restrict__ w,
                                         const T* __restrict__ bias, To* __restrict__ y, int N,
                                         int K, int act) {
    const int lane = threadIdx.x & 31;
    const int warp = blockIdx.x * kWarps + (threadIdx.x >> 5);
    const int row0 = warp * kRows;
    if (row0 >= N) return;
    const int chunks = K >> 3;  // 16-byte chunks per row
    const uint4* wrow[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        // Rows past N re-read the last row (no branch in the loop); their sums are not stored.
        const int row = min(row0 + r, N - 1);
        wrow[r] = reinterpret_cast<const uint4*>(w + (size_t)row * K);
    }
    const uint4* xv = reinterpret_cast<const uint4*>(x);

    float acc[M][kRows];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[m][r] = 0.0f;

    for (int c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
        uint4 wv[kUnroll][kRows];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int c = c0 + 32 * u;
#pragma unroll
            for (int r = 0; r < kRows; ++r)
                wv[u][r] = c < chunks ? load_stream(wrow[r] + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int c = c0 + 32 * u;
            if (c < chunks) {
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    float xf[8];
                    unpack8<T>(__ldg(xv + (size_t)m * chunks + c), xf);
#pragma unroll
                    for (int r = 0; r < kRows; ++r) acc[m][r] = dot8<T>(xf, wv[u][r], acc[m][r]);
                }
            }
        }
    }

#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], off);

    // Every lane holds every sum; lane m * kRows + r (< 32 as M <= 8, kRows <= 4) stores output (m,
    // row0 + r). Selecting first and applying the epilogue once per lane keeps one copy of its
    // code.
    float v = 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
            if (lane == m * kRows + r) v = acc[m][r];
    const int m = lane / kRows, row = row0 + lane % kRows;
    if (m < M && row < N) {
        if (bias != nullptr) v += widen(bias[row]);
        y[(size_t)m * N + row] = narrow<To>(activate(v, act));
    }
}

// D += A B on tensor cores, m16n8k16, fp32 accumulators; A is 16 x 16 (4 registers of packed
// pairs), B is 16 x 8 (2 registers).
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], unsigned a0, unsigned a1,
                                                        unsigned a2, unsigned a3, unsigned b0,
                                                        unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], unsigned a0, unsigned a1,
                                                 unsigned a2, unsigned a3, unsigned b0,
                                                 unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

constexpr int kMmaUnroll = 8;  // 16-byte chunks per row (2 rows per lane) in flight per lane

// The "mma" variant, runtime M <= 8: a block owns 16 output rows and its 4 warps split K. Each
// warp computes the 16 x 8 tile W[rows, kslice] x[0:8, kslice]^T with mma.sync: W rows are the
// A rows, x rows the B columns (columns >= M are computed from a repeated x row and dropped).
// The reduction order over K is free, so the k positions of one mma need not be contiguous: lane
// (g = lane / 4, q = lane % 4) loads one 16-byte chunk of W rows g and g + 8 and of x row g, and
// chunk element pairs (0,1), (2,3) feed the first mma's k pairs (2q, 2q+1), (2q+8, 2q+9) -- the
// A and B fragment layouts put those at the same k for every row and column -- and pairs (4,5),
// (6,7) the second mma's. Step s covers chunks [16 s, 16 s + 16): warp w, lane q takes chunk
// 16 s + 4 w + q, so a block reads 256 contiguous bytes of each of its rows per step. Each W
// element is read once and x once per 16 rows; the FMAs run on tensor cores, so M = 8 costs no
// more issue slots than M = 1. Partial tiles meet once in shared memory at the end.
template <typename T, typename To>
__device__ __forceinline__ void gemv_mma(const T* __restrict__ x, const T* __restrict__ w,
                                         const T* __restrict__ bias, To* __restrict__ y, int M,
                                         int N, int K, int act) {
    __shared__ __align__(16) float part[kWarps][16][8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int row0 = blockIdx.x * 16;
    const int chunks = K >> 3;
    // Rows past N re-read the last row and x rows past M the last x row; both are dropped.
    const uint4* wlo = reinterpret_cast<const uint4*>(w + (size_t)min(row0 + g, N - 1) * K);
    const uint4* whi = reinterpret_cast<const uint4*>(w + (size_t)min(row0 + g + 8, N - 1) * K);
    const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)min(g, M - 1) * K);
    const uint4 zero = make_uint4(0, 0, 0, 0);

    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // The trip count is warp-uniform (mma.sync needs every lane); chunks past K are zeros.
    for (int base = 4 * warp; base < chunks; base += 16 * kMmaUnroll) {
        uint4 lo[kMmaUnroll], hi[kMmaUnroll];
#pragma unroll
        for (int u = 0; u < kMmaUnroll; ++u) {
            const int c = base + 16 * u + q;
            lo[u] = c < chunks ? load_stream(wlo + c) : zero;
            hi[u] = c < chunks ? load_stream(whi + c) : zero;
        }
#pragma unroll
        for (int u = 0; u < kMmaUnroll; ++u) {
            const int c = base + 16 * u + q;
            const uint4 xv = c < chunks ? __ldg(xr + c) : zero;
            mma16816<T>(acc, lo[u].x, hi[u].x, lo[u].y, hi[u].y, xv.x, xv.y);
            mma16816<T>(acc, lo[u].z, hi[u].z, lo[u].w, hi[u].w, xv.z, xv.w);
        }
    }

    // Accumulator layout: acc[0..1] = (row g, columns 2q, 2q+1), acc[2..3] = (row g + 8, same).
    *reinterpret_cast<float2*>(&part[warp][g][2 * q]) = make_float2(acc[0], acc[1]);
    *reinterpret_cast<float2*>(&part[warp][g + 8][2 * q]) = make_float2(acc[2], acc[3]);
    __syncthreads();
    const int r = threadIdx.x & 15, m = threadIdx.x >> 4;  // consecutive threads: consecutive rows
    const int row = row0 + r;
    if (m < M && row < N) {
        float v = part[0][r][m];
#pragma unroll
        for (int i = 1; i < kWarps; ++i) v += part[i][r][m];
        if (bias != nullptr) v += widen(bias[row]);
        y[(size_t)m * N + row] = narrow<To>(activate(v, act));
    }
}

// Any K, any alignment, runtime M <= 8: one warp per output row, 2-byte loads.
template <typename T, typename To>
__device__ __forceinline__ void gemv_scalar(const T* __restrict__ x, const T* __restrict__ w,
                                            const T* __restrict__ bias, To* __restrict__ y, int M,
                                            int N, int K, int act) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (row >= N) return;
    const T* wr = w + (size_t)row * K;
    float acc[8];
#pragma unroll
    for (int m = 0; m < 8; ++m) acc[m] = 0.0f;
    for (int k = lane; k < K; k += 32) {
        const float wk = widen(wr[k]);
#pragma unroll
        for (int m = 0; m < 8; ++m)
            if (m < M) acc[m] = fmaf(widen(x[(size_t)m * K + k]), wk, acc[m]);
    }
    float v = 0.0f;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], off);
        if (lane == m) v = acc[m];
    }
    if (lane < M) {
        if (bias != nullptr) v += widen(bias[row]);
        y[(size_t)lane * N + row] = narrow<To>(activate(v, act));
    }
}

}  // namespace

// Entry points. simt: gemv_<dtype>_m<M>, M a template argument (the accumulators live in
// registers), kSimtRows output rows per warp and kSimtUnroll chunks per row in flight; mma and
// scalar: gemv_mma_<dtype> and gemv_scalar_<dtype>, M at run time. Each also exists with a
// float32 result (gemv_f32out_<dtype>_m<M>, gemv_mma_f32out_<dtype>, gemv_scalar_f32out_<dtype>):
// the fp32 sums stored unrounded, for logits whose top values a 16-bit rounding would tie.
constexpr int kSimtRows = 4, kSimtUnroll = 2;
#define PGK_GEMV_PARAMS(T, To) (const T* x, const T* w, const T* bias, To* y, int N, int K, int act)
#define PGK_GEMV_RUNTIME_M_PARAMS(T, To) \
    (const T* x, const T* w, const T* bias, To* y, int M, int N, int K, int act)
#define PGK_GEMV_M(name, T, To, M)                                            \
    PGK_KERNEL_BOUNDS(name##_m##M, PGK_GEMV_PARAMS(T, To), kWarps * 32) {     \
        gemv_vec<T, To, M, kSimtRows, kSimtUnroll>(x, w, bias, y, N, K, act); \
    }
// clang-format off
#define PGK_GEMV(name, mma_name, scalar_name, T, To)                                             \
    PGK_GEMV_M(name, T, To, 1) PGK_GEMV_M(name, T, To, 2) PGK_GEMV_M(name, T, To, 3)             \
    PGK_GEMV_M(name, T, To, 4) PGK_GEMV_M(name, T, To, 5) PGK_GEMV_M(name, T, To, 6)             \
    PGK_GEMV_M(name, T, To, 7) PGK_GEMV_M(name, T, To, 8)                                        \
    PGK_KERNEL_BOUNDS(mma_name, PGK_GEMV_RUNTIME_M_PARAMS(T, To), kWarps * 32) {                 \
        gemv_mma<T, To>(x, w, bias, y, M, N, K, act);                                            \
    }                                                                                            \
    PGK_KERNEL_BOUNDS(scalar_name, PGK_GEMV_RUNTIME_M_PARAMS(T, To), kWarps * 32) {              \
        gemv_scalar<T, To>(x, w, bias, y, M, N, K, act);                                         \
    }
// clang-format on
PGK_GEMV(gemv_bf16, gemv_mma_bf16, gemv_scalar_bf16, __nv_bfloat16, __nv_bfloat16)
PGK_GEMV(gemv_f16, gemv_mma_f16, gemv_scalar_f16, __half, __half)
PGK_GEMV(gemv_f32out_bf16, gemv_mma_f32out_bf16, gemv_scalar_f32out_bf16, __nv_bfloat16, float)
PGK_GEMV(gemv_f32out_f16, gemv_mma_f32out_f16, gemv_scalar_f32out_f16, __half, float)

// Launch geometry the host side plans with (KernelLibrary.constant("gemv", NAME)).
PGK_CONSTANT(GEMV_WARPS, kWarps);
PGK_CONSTANT(GEMV_MAX_ROWS, 8);  // M <= 8: gemv_scalar's and gemv_mma's accumulators
PGK_CONSTANT(GEMV_SIMT_ROWS_PER_BLOCK, kSimtRows* kWarps);
PGK_CONSTANT(GEMV_MMA_ROWS_PER_BLOCK, 16);  // gemv_mma: one 16-row m16n8k16 tile per block
