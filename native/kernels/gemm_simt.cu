// Matrix multiply on CUDA cores (built-in runtime kernels):
//   gemm_simt_f32:  fp32 (exact fp32 FMA, no TF32), 128x128x8 block tile, 8x8 outputs per thread
//                   (register blocking), shared-memory double buffering fed through registers.
//   gemm_naive_<t>: one thread per output, for float64 and the integer/bool dtypes, where a simple
//                   correct kernel is enough (integers wrap like NumPy's; bool is OR of ANDs).
// Every kernel computes C[z] = A[z] @ B[z] for z in [0, batch) with A (M x K) and B (K x N) read
// through element strides (any layout: transposed views are read in place, batch stride 0 is a
// broadcast operand) and C written row-major with row stride ldc.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

struct GemmParams {
    const void* a;
    const void* b;
    void* c;
    int m, n, k, batch;
    long long sam, sak, sbk, sbn;     // element strides of A (rows, cols) and B (rows, cols)
    long long batch_a, batch_b, ldc;  // batch strides (elements) of A and B; C's row stride
    long long batch_c;                // C's batch stride
};

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 8, kThreads = 256;

__device__ __forceinline__ void simt_load(const GemmParams& p, const float* a, const float* b,
                                          int m0, int n0, int k0, float (&ra)[4], float (&rb)[4]) {
    const int tid = threadIdx.x;
    // A: row tid/2, columns (tid%2)*4 + 0..3. B: row tid/32, columns (tid%32)*4 + 0..3.
    const int ar = m0 + tid / 2, ak = k0 + (tid % 2) * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        ra[i] = (ar < p.m && ak + i < p.k) ? a[ar * p.sam + (ak + i) * p.sak] : 0.0f;
    }
    const int bk = k0 + tid / 32, bn = n0 + (tid % 32) * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        rb[i] = (bk < p.k && bn + i < p.n) ? b[bk * p.sbk + (bn + i) * p.sbn] : 0.0f;
    }
}

__device__ __forceinline__ void simt_store(float (*as)[kBM + 4], float (*bs)[kBN],
                                           const float (&ra)[4], const float (&rb)[4]) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < 4; ++i) as[(tid % 2) * 4 + i][tid / 2] = ra[i];
    *reinterpret_cast<float4*>(&bs[tid / 32][(tid % 32) * 4]) =
        make_float4(rb[0], rb[1], rb[2], rb[3]);
}

template <typename T, typename Acc>
__device__ __forceinline__ void naive_impl(const GemmParams& p) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= p.m || col >= p.n) return;
    for (int z = blockIdx.z; z < p.batch; z += gridDim.z) {
        const T* a = static_cast<const T*>(p.a) + z * p.batch_a + row * p.sam;
        const T* b = static_cast<const T*>(p.b) + z * p.batch_b + col * p.sbn;
        Acc acc = 0;
        for (int k = 0; k < p.k; ++k)
            acc += static_cast<Acc>(a[k * p.sak]) * static_cast<Acc>(b[k * p.sbk]);
        static_cast<T*>(p.c)[z * p.batch_c + row * p.ldc + col] = static_cast<T>(acc);
    }
}

}  // namespace

extern "C" {

__global__ void __launch_bounds__(kThreads) gemm_simt_f32(GemmParams p) {
    __shared__ __align__(16) float as[2][kBK][kBM + 4];
    __shared__ __align__(16) float bs[2][kBK][kBN];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int ktiles = (p.k + kBK - 1) / kBK;
    for (int z = blockIdx.z; z < p.batch; z += gridDim.z) {
        const float* a = static_cast<const float*>(p.a) + z * p.batch_a;
        const float* b = static_cast<const float*>(p.b) + z * p.batch_b;
        float acc[8][8] = {};
        float ra[4], rb[4];
        simt_load(p, a, b, m0, n0, 0, ra, rb);
        simt_store(as[0], bs[0], ra, rb);
        __syncthreads();
        for (int kt = 0; kt < ktiles; ++kt) {
            const int cur = kt & 1;
            // Prefetch the next tile into registers while this one is multiplied.
            if (kt + 1 < ktiles) simt_load(p, a, b, m0, n0, (kt + 1) * kBK, ra, rb);
#pragma unroll
            for (int kk = 0; kk < kBK; ++kk) {
                float fa[8], fb[8];
                *reinterpret_cast<float4*>(&fa[0]) =
                    *reinterpret_cast<const float4*>(&as[cur][kk][ty * 4]);
                *reinterpret_cast<float4*>(&fa[4]) =
                    *reinterpret_cast<const float4*>(&as[cur][kk][64 + ty * 4]);
                *reinterpret_cast<float4*>(&fb[0]) =
                    *reinterpret_cast<const float4*>(&bs[cur][kk][tx * 4]);
                *reinterpret_cast<float4*>(&fb[4]) =
                    *reinterpret_cast<const float4*>(&bs[cur][kk][64 + tx * 4]);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
                }
            }
            // The other stage was last read before the previous barrier: store into it now.
            if (kt + 1 < ktiles) simt_store(as[cur ^ 1], bs[cur ^ 1], ra, rb);
            __syncthreads();
        }
        float* c = static_cast<float*>(p.c) + z * p.batch_c;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
            if (row >= p.m) continue;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int col = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
                if (col < p.n) c[row * p.ldc + col] = acc[i][j];
            }
        }
    }
}

__global__ void gemm_naive_f64(GemmParams p) { naive_impl<double, double>(p); }
__global__ void gemm_naive_i8(GemmParams p) { naive_impl<signed char, long long>(p); }
__global__ void gemm_naive_i16(GemmParams p) { naive_impl<short, long long>(p); }
__global__ void gemm_naive_i32(GemmParams p) { naive_impl<int, long long>(p); }
__global__ void gemm_naive_i64(GemmParams p) { naive_impl<long long, long long>(p); }
__global__ void gemm_naive_u8(GemmParams p) { naive_impl<unsigned char, unsigned long long>(p); }
__global__ void gemm_naive_b1(GemmParams p) { naive_impl<bool, bool>(p); }
}
