// Matrix multiply on tensor cores with mma.sync (built-in runtime kernels, SM 80 and newer):
//   gemm_mma_bf16_*  mma.m16n8k16 bf16 x bf16 -> fp32 accumulate, bf16 out
//   gemm_mma_f16_*   mma.m16n8k16 f16 x f16 -> fp32 accumulate, f16 out
//   gemm_mma_tf32_*  mma.m16n8k8 tf32 x tf32 -> fp32 (only when the caller opted into TF32)
// Block tile 128x128xBK (BK = 64 bytes of K: 32 halves or 16 floats), 8 warps as 2 (M) x 4 (N),
// each warp 64x32 = 4x4 mma tiles. Two shared-memory stages: the tile after the current one is
// always loaded into the stage not being read (next = cur ^ 1), then waited for before use.
//   *_fast:    cp.async 16-byte copies; needs A row-major (K contiguous) and B row-major (N
//              contiguous), K and N multiples of 16 bytes' worth of elements, 16-byte aligned rows.
//              Edge chunks outside M/N/K are zero-filled by cp.async's src-size operand.
//   *_generic: element loads through arbitrary strides (transposed views, odd sizes), bounds
//              checked; same tiles and mma code.
// Fragment layouts are the PTX ISA's for mma.m16n8k*: A and C row-based, B column-based; 16-bit A
// fragments come from ldmatrix, 16-bit B fragments from ldmatrix.trans on the k-major B tile, TF32
// fragments from 32-bit shared loads (ldmatrix cannot transpose 32-bit data).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gemm_common.cuh"

namespace {

constexpr int kBM = 128, kBN = 128, kThreads = 256;

template <typename T>
struct Tile {
    static constexpr int kChunk = 16 / sizeof(T);  // elements per 16-byte copy
    static constexpr int kBK = 64 / sizeof(T);     // 4 chunks of K per A row
    static constexpr int kLdA = kBK + kChunk;      // padded shared row strides
    static constexpr int kLdB = kBN + (sizeof(T) == 4 ? 8 : 8);
    T a[2][kBM][kLdA];
    T b[2][kBK][kLdB];
};

// The pointer form (gemm_common.cuh has the shared-address form the wgmma kernels use).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <typename T, bool kFast>
__device__ __forceinline__ void load_tile(Tile<T>& s, int stage, const GemmParams& p, const T* a,
                                          const T* b, int m0, int n0, int k0) {
    using S = Tile<T>;
    const int tid = threadIdx.x;
    if constexpr (kFast) {
        constexpr int kChunksPerA = S::kBK / S::kChunk;  // 4
        constexpr int kChunksPerB = kBN / S::kChunk;     // 16 or 32
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int c = tid + i * kThreads;
            const int row = c / kChunksPerA, kc = (c % kChunksPerA) * S::kChunk;
            const int gm = m0 + row, gk = k0 + kc;
            const bool valid = gm < p.m && gk < p.k;
            cp_async16(&s.a[stage][row][kc], valid ? a + gm * p.sam + gk : a, valid);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int c = tid + i * kThreads;
            const int row = c / kChunksPerB, nc = (c % kChunksPerB) * S::kChunk;
            const int gk = k0 + row, gn = n0 + nc;
            const bool valid = gk < p.k && gn < p.n;
            cp_async16(&s.b[stage][row][nc], valid ? b + gk * p.sbk + gn : b, valid);
        }
    } else {
        constexpr int kPerThreadA = kBM * S::kBK / kThreads;
#pragma unroll 4
        for (int i = 0; i < kPerThreadA; ++i) {
            const int e = tid + i * kThreads;
            const int row = e / S::kBK, kk = e % S::kBK;
            const int gm = m0 + row, gk = k0 + kk;
            s.a[stage][row][kk] = (gm < p.m && gk < p.k) ? a[gm * p.sam + gk * p.sak] : T(0.0f);
        }
        constexpr int kPerThreadB = S::kBK * kBN / kThreads;
#pragma unroll 4
        for (int i = 0; i < kPerThreadB; ++i) {
            const int e = tid + i * kThreads;
            const int row = e / kBN, col = e % kBN;
            const int gk = k0 + row, gn = n0 + col;
            s.b[stage][row][col] = (gk < p.k && gn < p.n) ? b[gk * p.sbk + gn * p.sbn] : T(0.0f);
        }
    }
}

template <typename T>
struct MmaOp;

template <>
struct MmaOp<__nv_bfloat16> {
    __device__ static void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <>
struct MmaOp<__half> {
    __device__ static void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// One BK slice of the warp's 64x32 tile.
template <typename T>
__device__ __forceinline__ void compute_stage(Tile<T>& s, int stage, float (&acc)[4][4][4], int wm,
                                              int wn, int lane) {
    using S = Tile<T>;
    if constexpr (sizeof(T) == 2) {
#pragma unroll
        for (int ks = 0; ks < S::kBK; ks += 16) {
            unsigned af[4][4], bf[4][2];
#pragma unroll
            for (int mt = 0; mt < 4; ++mt) {
                const T* p = &s.a[stage][wm * 64 + mt * 16 + (lane & 15)][ks + (lane >> 4) * 8];
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(af[mt][0]), "=r"(af[mt][1]), "=r"(af[mt][2]), "=r"(af[mt][3])
                             : "r"(smem_addr(p)));
            }
#pragma unroll
            for (int np = 0; np < 2; ++np) {
                const T* p = &s.b[stage][ks + (lane & 15)][wn * 32 + np * 16 + (lane >> 4) * 8];
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(bf[np * 2][0]), "=r"(bf[np * 2][1]), "=r"(bf[np * 2 + 1][0]),
                               "=r"(bf[np * 2 + 1][1])
                             : "r"(smem_addr(p)));
            }
#pragma unroll
            for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
                for (int nt = 0; nt < 4; ++nt)
                    MmaOp<T>::run(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
            }
        }
    } else {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int ks = 0; ks < S::kBK; ks += 8) {
            unsigned af[4][4], bf[4][2];
#pragma unroll
            for (int mt = 0; mt < 4; ++mt) {
                const int r = wm * 64 + mt * 16 + g;
                af[mt][0] = to_tf32(s.a[stage][r][ks + t]);
                af[mt][1] = to_tf32(s.a[stage][r + 8][ks + t]);
                af[mt][2] = to_tf32(s.a[stage][r][ks + t + 4]);
                af[mt][3] = to_tf32(s.a[stage][r + 8][ks + t + 4]);
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int c = wn * 32 + nt * 8 + g;
                bf[nt][0] = to_tf32(s.b[stage][ks + t][c]);
                bf[nt][1] = to_tf32(s.b[stage][ks + t + 4][c]);
            }
#pragma unroll
            for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    float (&d)[4] = acc[mt][nt];
                    asm volatile(
                        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                        : "r"(af[mt][0]), "r"(af[mt][1]), "r"(af[mt][2]), "r"(af[mt][3]),
                          "r"(bf[nt][0]), "r"(bf[nt][1]));
                }
            }
        }
    }
}

template <typename T>
__device__ __forceinline__ T from_float(float x) {
    return T(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
    return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

template <typename T, bool kFast>
__device__ __forceinline__ void gemm_mma(const GemmParams& p) {
    using S = Tile<T>;
    __shared__ __align__(128) S s;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp / 4, wn = warp % 4;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int ktiles = (p.k + S::kBK - 1) / S::kBK;
    for (int z = blockIdx.z; z < p.batch; z += gridDim.z) {
        const T* a = static_cast<const T*>(p.a) + z * p.batch_a;
        const T* b = static_cast<const T*>(p.b) + z * p.batch_b;
        float acc[4][4][4] = {};
        load_tile<T, kFast>(s, 0, p, a, b, m0, n0, 0);
        cp_async_commit();
        for (int kt = 0; kt < ktiles; ++kt) {
            const int cur = kt & 1;
            if (kt + 1 < ktiles) {
                load_tile<T, kFast>(s, cur ^ 1, p, a, b, m0, n0, (kt + 1) * S::kBK);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            compute_stage<T>(s, cur, acc, wm, wn, lane);
            __syncthreads();
        }
        T* c = static_cast<T*>(p.c) + z * p.batch_c;
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int col = n0 + wn * 32 + nt * 8 + 2 * t;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = m0 + wm * 64 + mt * 16 + g + h * 8;
                    if (row >= p.m) continue;
                    if (col < p.n) c[row * p.ldc + col] = from_float<T>(acc[mt][nt][2 * h]);
                    if (col + 1 < p.n)
                        c[row * p.ldc + col + 1] = from_float<T>(acc[mt][nt][2 * h + 1]);
                }
            }
        }
    }
}

}  // namespace

extern "C" {
__global__ void __launch_bounds__(kThreads) gemm_mma_bf16_fast(GemmParams p) {
    gemm_mma<__nv_bfloat16, true>(p);
}
__global__ void __launch_bounds__(kThreads) gemm_mma_bf16_generic(GemmParams p) {
    gemm_mma<__nv_bfloat16, false>(p);
}
__global__ void __launch_bounds__(kThreads) gemm_mma_f16_fast(GemmParams p) {
    gemm_mma<__half, true>(p);
}
__global__ void __launch_bounds__(kThreads) gemm_mma_f16_generic(GemmParams p) {
    gemm_mma<__half, false>(p);
}
__global__ void __launch_bounds__(kThreads) gemm_mma_tf32_fast(GemmParams p) {
    gemm_mma<float, true>(p);
}
__global__ void __launch_bounds__(kThreads) gemm_mma_tf32_generic(GemmParams p) {
    gemm_mma<float, false>(p);
}
}
