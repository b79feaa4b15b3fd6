// Float32 matrix multiply on Hopper tensor cores with TF32 wgmma (built-in runtime kernels):
//   pack_tf32_kmajor: copies one operand, any strides, into a K-major scratch array
//       dst[z][r][c] = tf32(src[z][r][c]), rows padded with zeros from `cols` to `cols_padded`
//       (a multiple of 4 floats, so every row is a whole number of 16-byte chunks). Rounding to
//       nearest here is what makes the product as accurate as the mma.sync path
//       (cvt.rna.tf32.f32): wgmma reading fp32 from shared memory would drop the low 13 mantissa
//       bits (truncation, biased toward zero, ~2x the error of rounding). Any arch.
//   gemm_wgmma_tf32 (sm_90a only): C[z] = A[z] @ B[z]^T over the packed operands, A (m, kp) and
//       B (n, kp) both K-major, fp32 accumulation and output. wgmma reads 32-bit operands
//       K-major only (no transpose bit for tf32), which is why B is repacked as (n, kp).
// Block tile 128 (M) x 256 (N) x 32 (K = 128 bytes of floats); 2 warpgroups, each issuing
// wgmma.m64n256k8 on its 64 rows, both operands read from shared memory through matrix
// descriptors (128-byte swizzle, K-major). Operands are fed by cp.async into a 4-stage ring: the
// tile two steps ahead is loaded into a stage no wgmma still reads (one wgmma group stays in
// flight), then made visible to the async proxy (fence.proxy.async) before the barrier that
// releases it. Same pipeline as gemm_wgmma.cu (bf16/f16), which has 64 K-elements of 2 bytes per
// stage: per stage both kernels move 48 KiB and issue the same tensor-core time.
//   A tile: 128 rows of 128 bytes, 16-byte chunk c of row r stored at chunk c ^ (r % 8)
//   (Swizzle<3,4,3>), 8 rows per 1024-byte atom (SBO); the k8 step s starts 32 * s bytes in.
//   B tile: 256 rows (n) laid out the same way.
// Edge tiles: cp.async zero-fills chunks outside M/N/kp; the epilogue stores only inside.
// On other architectures the GEMM entry point exists but traps: the host launches it only on
// SM 9.0.

#include "gemm_common.cuh"

// Mirrors PackParams in native/ops/matmul.cpp.
struct PackParams {
    const float* src;
    float* dst;
    int rows, cols, cols_padded, batch;
    long long s_batch, s_row, s_col;  // element strides of src
};

namespace {

constexpr int kThreads = 256;
constexpr int kPackTile = 32, kPackRowsPerPass = 8, kPackThreads = kPackTile * kPackRowsPerPass;

__device__ __forceinline__ float round_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

#ifdef PGK_HAS_WGMMA

constexpr int kBM = 128, kBN = 256, kBK = 32, kStages = 4, kPrefetch = 2;
constexpr int kABytes = kBM * kBK * 4;          // 16 KiB
constexpr int kBBytes = kBN * kBK * 4;          // 32 KiB
constexpr int kStageBytes = kABytes + kBBytes;  // 48 KiB
constexpr unsigned kAtomBytes = 1024;           // 8 rows x 128 bytes: SBO

// tf32 has no transpose immediates: d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b.
__device__ __forceinline__ void wgmma_tf32(float (&d)[128], unsigned long long da,
                                           unsigned long long db) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
        "}, %128, %129, 1, 1, 1;\n}\n"
        : PGK_WGMMA_OUTS(d)
        : "l"(da), "l"(db));
}

// `rows` rows of 8 16-byte chunks from K-major `src` (row stride `ld`) into the swizzled tile at
// `s`; rows at or past `limit` and chunks at or past `k` are zero-filled.
template <int kRows>
__device__ __forceinline__ void load_rows(unsigned s, const float* src, long long ld, int r0,
                                          int limit, int k0, int k) {
#pragma unroll
    for (int i = 0; i < kRows * 8 / kThreads; ++i) {
        const int c = threadIdx.x + i * kThreads;
        const int row = c >> 3, ch = c & 7;
        const int gr = r0 + row, gk = k0 + ch * 4;
        const bool valid = gr < limit && gk < k;
        cp_async16(s + row * 128 + ((ch ^ (row & 7)) << 4), valid ? src + gr * ld + gk : src,
                   valid);
    }
}

__device__ __forceinline__ void gemm_tf32(const GemmParams& p) {
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_addr(smem_raw) + 1023u) & ~1023u;  // swizzle atoms: 1 KiB aligned
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
    const int ktiles = (p.k + kBK - 1) / kBK;
    // A float2 store needs an even column offset from an 8-byte aligned row start.
    const bool pairs = (p.ldc % 2 == 0) && (p.batch_c % 2 == 0) &&
                       (reinterpret_cast<unsigned long long>(p.c) % 8 == 0);
    for (int z = blockIdx.z; z < p.batch; z += gridDim.z) {
        const float* a = static_cast<const float*>(p.a) + z * p.batch_a;
        const float* b = static_cast<const float*>(p.b) + z * p.batch_b;
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) d[i] = 0.0f;
#pragma unroll
        for (int s = 0; s < kPrefetch; ++s) {
            if (s < ktiles) {
                const unsigned st = base + s * kStageBytes;
                load_rows<kBM>(st, a, p.sam, m0, p.m, s * kBK, p.k);
                load_rows<kBN>(st + kABytes, b, p.sbn, n0, p.n, s * kBK, p.k);
            }
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
                const unsigned st = base + (next % kStages) * kStageBytes;
                load_rows<kBM>(st, a, p.sam, m0, p.m, next * kBK, p.k);
                load_rows<kBN>(st + kABytes, b, p.sbn, n0, p.n, next * kBK, p.k);
            }
            asm volatile("cp.async.commit_group;\n" ::);
            const unsigned sa = base + (kt % kStages) * kStageBytes + wg * 64 * 128;
            const unsigned sb = base + (kt % kStages) * kStageBytes + kABytes;
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int s = 0; s < kBK / 8; ++s) {
                wgmma_tf32(d, desc(sa + s * 32, 16, kAtomBytes), desc(sb + s * 32, 16, kAtomBytes));
            }
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        float* c = static_cast<float*>(p.c) + z * p.batch_c;
        const int row0 = m0 + wg * 64 + warp * 16 + lane / 4;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const int col = n0 + j * 8 + 2 * (lane % 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + 8 * h;
                if (row >= p.m) continue;
                float* dst = c + row * p.ldc + col;
                const float x = d[4 * j + 2 * h], y = d[4 * j + 2 * h + 1];
                if (pairs && col + 1 < p.n) {
                    *reinterpret_cast<float2*>(dst) = make_float2(x, y);
                } else {
                    if (col < p.n) dst[0] = x;
                    if (col + 1 < p.n) dst[1] = y;
                }
            }
        }
        __syncthreads();  // the next batch item reuses the stages
    }
}

#endif  // PGK_HAS_WGMMA

}  // namespace

extern "C" {

// Grid: x over row tiles of 32, y over column tiles of 32 (of cols_padded), z over the batch;
// block 32 x 8. Each tile goes through shared memory so that both the read (along whichever of
// rows/cols is contiguous in src) and the write (along cols of dst) are coalesced.
__global__ void __launch_bounds__(kPackThreads) pack_tf32_kmajor(PackParams p) {
    __shared__ float tile[kPackTile][kPackTile + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.x * kPackTile, c0 = blockIdx.y * kPackTile;
    // A transposing read (rows contiguous in src) walks rows with the lanes.
    const bool rows_fast = p.s_row == 1 && p.s_col != 1;
    for (int z = blockIdx.z; z < p.batch; z += gridDim.z) {
        const float* src = p.src + z * p.s_batch;
#pragma unroll
        for (int i = ty; i < kPackTile; i += kPackRowsPerPass) {
            const int r = r0 + (rows_fast ? tx : i), c = c0 + (rows_fast ? i : tx);
            const float v = r < p.rows && c < p.cols ? src[r * p.s_row + c * p.s_col] : 0.0f;
            if (rows_fast) {
                tile[tx][i] = v;
            } else {
                tile[i][tx] = v;
            }
        }
        __syncthreads();
        float* dst = p.dst + z * static_cast<long long>(p.rows) * p.cols_padded;
#pragma unroll
        for (int i = ty; i < kPackTile; i += kPackRowsPerPass) {
            const int r = r0 + i, c = c0 + tx;
            if (r < p.rows && c < p.cols_padded) {
                dst[static_cast<long long>(r) * p.cols_padded + c] = round_tf32(tile[i][tx]);
            }
        }
        __syncthreads();  // the next batch item reuses the tile
    }
}

__global__ void __launch_bounds__(kThreads, 1) gemm_wgmma_tf32(GemmParams p) {
#ifdef PGK_HAS_WGMMA
    gemm_tf32(p);
#else
    __trap();
#endif
}
}
