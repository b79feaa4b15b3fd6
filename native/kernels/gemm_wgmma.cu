// Matrix multiply on Hopper tensor cores with wgmma (built-in runtime kernels, sm_90a only):
//   gemm_wgmma_bf16 / gemm_wgmma_f16: bf16 or f16 inputs, fp32 accumulation, same-dtype output.
// Block tile 128 (M) x 256 (N) x 64 (K); 2 warpgroups, each issuing wgmma.m64n256k16 on its 64
// rows with both operands read from shared memory through matrix descriptors (128-byte
// swizzle). Operands are fed by cp.async into a 4-stage ring: the tile two steps ahead is
// loaded into a stage that no wgmma still reads (one wgmma group stays in flight), then made
// visible to the async proxy (fence.proxy.async) before the barrier that releases it.
//   A: row-major (K contiguous) = wgmma's K-major layout; a 128x64 tile is 128 rows of 128 bytes,
//      16-byte chunk c of row r stored at chunk c ^ (r % 8) (Swizzle<3,4,3>).
//   B: row-major (N contiguous) = wgmma's MN-major layout (imm-trans-b = 1); the 64x256 tile is
//      four 64-column blocks (LBO apart), each 64 k-rows of 128 bytes swizzled the same way,
//      8 k-rows per 1024-byte atom (SBO apart).
// Needs A and B row-major with K and N multiples of 8 and 16-byte aligned rows (the host checks;
// other layouts use gemm_mma). Edge tiles: cp.async zero-fills chunks outside M/N/K, the
// epilogue stores only inside. On other architectures the entry points exist but trap: the
// host launches them only on SM 9.0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gemm_common.cuh"

namespace {

constexpr int kThreads = 256;

#ifdef PGK_HAS_WGMMA

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kPrefetch = 2;
constexpr int kABytes = kBM * kBK * 2;          // 16 KiB
constexpr int kBBytes = kBK * kBN * 2;          // 32 KiB
constexpr int kStageBytes = kABytes + kBBytes;  // 48 KiB
constexpr unsigned kBBlockBytes = kBK * 128;    // one 64-column block of B: LBO
constexpr unsigned kAtomBytes = 1024;           // 8 rows x 128 bytes: SBO

#define PGK_WGMMA_BF16(d, da, db)                                                         \
    asm volatile(                                                                         \
        "{\n"                                                                             \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "                          \
        "{"                                                                               \
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                          \
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                \
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                \
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                \
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                \
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"                \
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"    \
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127" \
        "}, %128, %129, 1, 1, 1, 0, 1;\n}\n"                                              \
        : PGK_WGMMA_OUTS(d)                                                               \
        : "l"(da), "l"(db))

#define PGK_WGMMA_F16(d, da, db)                                                          \
    asm volatile(                                                                         \
        "{\n"                                                                             \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "                            \
        "{"                                                                               \
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                          \
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                \
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                \
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                \
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"                \
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"                \
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"    \
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127" \
        "}, %128, %129, 1, 1, 1, 0, 1;\n}\n"                                              \
        : PGK_WGMMA_OUTS(d)                                                               \
        : "l"(da), "l"(db))

template <typename T>
__device__ __forceinline__ void load_stage(unsigned sa, const GemmParams& p, const T* a, const T* b,
                                           int m0, int n0, int k0) {
    const int tid = threadIdx.x;
    const unsigned sb = sa + kABytes;
#pragma unroll
    for (int i = 0; i < kBM * 8 / kThreads; ++i) {  // A: 128 rows x 8 chunks
        const int c = tid + i * kThreads;
        const int row = c >> 3, ch = c & 7;
        const int gm = m0 + row, gk = k0 + ch * 8;
        const bool valid = gm < p.m && gk < p.k;
        cp_async16(sa + row * 128 + ((ch ^ (row & 7)) << 4), valid ? a + gm * p.sam + gk : a,
                   valid);
    }
#pragma unroll
    for (int i = 0; i < kBK * 32 / kThreads; ++i) {  // B: 64 k-rows x 32 chunks
        const int c = tid + i * kThreads;
        const int row = c >> 5, nch = c & 31;
        const int blk = nch >> 3, ch = nch & 7;
        const int gk = k0 + row, gn = n0 + nch * 8;
        const bool valid = gk < p.k && gn < p.n;
        cp_async16(sb + blk * kBBlockBytes + row * 128 + ((ch ^ (row & 7)) << 4),
                   valid ? b + gk * p.sbk + gn : b, valid);
    }
}

template <typename T>
__device__ __forceinline__ void wgmma_step(float (&d)[128], unsigned long long da,
                                           unsigned long long db);
template <>
__device__ __forceinline__ void wgmma_step<__nv_bfloat16>(float (&d)[128], unsigned long long da,
                                                          unsigned long long db) {
    PGK_WGMMA_BF16(d, da, db);
}
template <>
__device__ __forceinline__ void wgmma_step<__half>(float (&d)[128], unsigned long long da,
                                                   unsigned long long db) {
    PGK_WGMMA_F16(d, da, db);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
    return __float2half_rn(x);
}

template <typename T>
__device__ __forceinline__ void store_pair(T* c, float x, float y);
template <>
__device__ __forceinline__ void store_pair<__nv_bfloat16>(__nv_bfloat16* c, float x, float y) {
    *reinterpret_cast<__nv_bfloat162*>(c) = __floats2bfloat162_rn(x, y);
}
template <>
__device__ __forceinline__ void store_pair<__half>(__half* c, float x, float y) {
    *reinterpret_cast<__half2*>(c) = __floats2half2_rn(x, y);
}

template <typename T>
__device__ __forceinline__ void gemm_wgmma(const GemmParams& p) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // swizzle atoms: 1 KiB aligned
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int ktiles = (p.k + kBK - 1) / kBK;
    for (int z = blockIdx.z; z < p.batch; z += gridDim.z) {
        const T* a = static_cast<const T*>(p.a) + z * p.batch_a;
        const T* b = static_cast<const T*>(p.b) + z * p.batch_b;
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) d[i] = 0.0f;
#pragma unroll
        for (int s = 0; s < kPrefetch; ++s) {
            if (s < ktiles) load_stage<T>(base + s * kStageBytes, p, a, b, m0, n0, s * kBK);
            asm volatile("cp.async.commit_group;\n" ::);
        }
        for (int kt = 0; kt < ktiles; ++kt) {
            asm volatile("cp.async.wait_group %0;\n" ::"n"(kPrefetch - 1));
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            __syncthreads();
            // The stage of tile kt + 2 was last read by the wgmma group of tile kt - 2, which
            // every warpgroup waited for before this barrier.
            const int next = kt + kPrefetch;
            if (next < ktiles) {
                load_stage<T>(base + (next % kStages) * kStageBytes, p, a, b, m0, n0, next * kBK);
            }
            asm volatile("cp.async.commit_group;\n" ::);
            const unsigned sa = base + (kt % kStages) * kStageBytes + wg * 64 * 128;
            const unsigned sb = base + (kt % kStages) * kStageBytes + kABytes;
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int s = 0; s < kBK / 16; ++s) {
                wgmma_step<T>(d, desc(sa + s * 32, 16, kAtomBytes),
                              desc(sb + s * 2 * kAtomBytes, kBBlockBytes, kAtomBytes));
            }
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        T* c = static_cast<T*>(p.c) + z * p.batch_c;
        const int row0 = m0 + wg * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const int col = n0 + j * 8 + 2 * (lane % 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + 8 * h;
                if (row >= p.m) continue;
                T* dst = c + row * p.ldc + col;
                if (col + 1 < p.n) {
                    store_pair<T>(dst, d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                } else if (col < p.n) {
                    *dst = from_float<T>(d[4 * j + 2 * h]);
                }
            }
        }
        __syncthreads();  // the next batch item reuses the stages
    }
}

#endif  // PGK_HAS_WGMMA

}  // namespace

extern "C" {
__global__ void __launch_bounds__(kThreads, 1) gemm_wgmma_bf16(GemmParams p) {
#ifdef PGK_HAS_WGMMA
    gemm_wgmma<__nv_bfloat16>(p);
#else
    __trap();
#endif
}
__global__ void __launch_bounds__(kThreads, 1) gemm_wgmma_f16(GemmParams p) {
#ifdef PGK_HAS_WGMMA
    gemm_wgmma<__half>(p);
#else
    __trap();
#endif
}
}
