// The GEMVs of a batch-1 decode layer with their neighbours fused in (host side:
// ops/decode_linear.py). One token's layer is launch-bound, not byte-bound: SmolLM2-135M reads 7 MB
// of weights a layer, a few microseconds of DRAM time, while the unfused layer runs eleven
// kernels of two to five microseconds each. Here a layer is four GEMVs and the attention:
//
//   [RMSNorm -> q/k/v GEMV (+ bias) -> RoPE, k/v into the cache]  (epilogue kRopeKV)
//   [o_proj GEMV -> + residual, written back into the residual]   (epilogue kResidual)
//   [RMSNorm -> gate/up GEMV -> silu(gate) * up]                   (epilogue kSwiGLU)
//   [down GEMV -> + residual]                                      (epilogue kResidual)
//
//   decode_linear_<dtype>(x, norm_w, eps, w, bias, y, k_cache, v_cache, cos, sin, pos, N, K,
//                         pair, mode, q_heads, kv_heads, head_dim, capacity, max_pos, table_kind)
//
// y = x @ w^T (+ bias), x one row of K, w [N, K] (nn.Linear layout), fp32 sums.
// Prologue (norm_w != null): x is the residual stream and is RMS-normalised first, every block
// recomputing the row's sum of squares (the row is a few KB and L2-resident: cheaper than a
// launch); the normalised row is rounded to T, as the norm kernel stores it, and kept in shared
// memory for the block's warps.
// Rows: a warp owns 4 output rows. Without pairing they are consecutive. With pairing (`pair` =
// S > 0) the output is segments of 2S rows whose row j and j + S meet in the epilogue (RoPE's
// NeoX halves of a head, S = head_dim / 2; gate and up, S = intermediate size): a warp owns pair
// indices p, p + 1 of one segment, rows (lo, lo + 1, lo + S, lo + S + 1), so the partners are in
// its registers after the warp reduction, with no shared memory or second kernel.
// Epilogues (each value first rounded to T as the unfused GEMV stores it, then widened, so the
// results are those of the unfused kernels):
//   kStore    y[row] = sum + bias, T, or float32 unrounded when f32out (logits);
//   kResidual y[row] = round(round(sum + bias) + y[row]): y is the residual, updated in place;
//   kSwiGLU   y[p] = silu(gate) * up (y has N / 2 entries);
//   kRopeKV   heads 0..q_heads-1 rotated into y ([q_heads, head_dim]), the next kv_heads rotated
//             into k_cache [kv_heads, capacity, head_dim] and the last kv_heads into v_cache, at
//             slot pos % capacity; cos/sin [max_pos, head_dim / 2] (table_kind 0 fp32, 1 fp16,
//             2 bf16); a position outside [0, max_pos) rotates by angle 0, as rope_<dtype>.
//
// Programmatic dependent launch: the weights never depend on the previous kernel, so a block
// issues its first weight loads, then waits (griddepcontrol.wait) for the kernel before it, and
// only then reads x or touches y or the cache. It also lets the next kernel launch at once
// (griddepcontrol.launch_dependents), whose blocks then do the same. Launched without the
// attribute both instructions are no-ops.
#include "linear_epilogue.cuh"
#include "pygpukit/kernel.cuh"

using namespace pygpukit_linear;

namespace {

constexpr int kWarps = 4;   // warps per block
constexpr int kRows = 4;    // output rows per warp
constexpr int kUnroll = 2;  // 16-byte chunks per row in flight per lane

enum Mode : int { kStore = 0, kResidual = 1, kSwiGLU = 2, kRopeKV = 3 };

__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

template <typename T>
__device__ __forceinline__ float2 unpack2(unsigned u);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(unsigned u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(unsigned u) {
    __half2 h = *reinterpret_cast<__half2*>(&u);
    return __half22float2(h);
}

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
    float2 a = unpack2<T>(v.x), b = unpack2<T>(v.y), c = unpack2<T>(v.z), d = unpack2<T>(v.w);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

__device__ __forceinline__ float table_at(const void* __restrict__ t, long long i, int kind) {
    if (kind == 1) return __half2float(static_cast<const __half*>(t)[i]);
    if (kind == 2) return __bfloat162float(static_cast<const __nv_bfloat16*>(t)[i]);
    return static_cast<const float*>(t)[i];
}

// Eight elements of x normalised by inv and scaled by the norm weight, rounded to T.
template <typename T>
__device__ __forceinline__ uint4 normalized(const uint4& xc, const uint4& wc, float inv) {
    float f[8], g[8];
    unpack8<T>(xc, f);
    unpack8<T>(wc, g);
    T r[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) r[e] = narrow<T>(f[e] * inv * g[e]);
    return *reinterpret_cast<uint4*>(r);
}

// The rounded output of the unfused GEMV, widened again.
template <typename T>
__device__ __forceinline__ float rounded(float v) {
    return widen(narrow<T>(v));
}

// RMSNorm of x [K] into xs (shared, rounded to T): xs = x * rsqrt(mean(x^2) + eps) * w.
// A thread loads its first kHeld chunks of x and w together and keeps them in registers, so the
// prologue costs one round trip to L2 (K up to kHeld * 8 * 128 = 4096); chunks past those are
// read again from global memory for the second pass.
template <typename T>
__device__ __forceinline__ void norm_into_shared(const T* __restrict__ x, const T* __restrict__ w,
                                                 float eps, T* xs, int K) {
    constexpr int kHeld = 4;
    __shared__ float warp_sums[kWarps];
    const int chunks = K >> 3;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    const uint4* wv = reinterpret_cast<const uint4*>(w);
    uint4* out = reinterpret_cast<uint4*>(xs);
    uint4 xh[kHeld], wh[kHeld];
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < chunks) xh[i] = xv[c], wh[i] = wv[c];
    }
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
        if (threadIdx.x + i * blockDim.x < chunks) {
            float f[8];
            unpack8<T>(xh[i], f);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc += f[e] * f[e];
        }
    }
    for (int c = threadIdx.x + kHeld * blockDim.x; c < chunks; c += blockDim.x) {
        float f[8];
        unpack8<T>(xv[c], f);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc += f[e] * f[e];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) total += warp_sums[i];
    const float inv = rsqrtf(total * (1.0f / static_cast<float>(K)) + eps);  // as the norm kernel
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
        const int c = threadIdx.x + i * blockDim.x;
        if (c < chunks) out[c] = normalized<T>(xh[i], wh[i], inv);
    }
    for (int c = threadIdx.x + kHeld * blockDim.x; c < chunks; c += blockDim.x)
        out[c] = normalized<T>(xv[c], wv[c], inv);
    __syncthreads();
}

template <typename T>
__device__ __forceinline__ void decode_linear(
    const T* __restrict__ x, const T* __restrict__ norm_w, float eps, const T* __restrict__ w,
    const T* __restrict__ bias, void* y, T* __restrict__ k_cache, T* __restrict__ v_cache,
    const void* __restrict__ cos_table, const void* __restrict__ sin_table,
    const int* __restrict__ pos, int N, int K, int pair, int mode, int f32out, int q_heads,
    int kv_heads, int head_dim, int capacity, long long max_pos, int table_kind) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int lane = threadIdx.x & 31;
    const int warp = blockIdx.x * kWarps + (threadIdx.x >> 5);
    // This warp's rows: consecutive, or two pairs (lo, lo + 1) and (lo + S, lo + S + 1).
    int rows[kRows];
    int p0 = 0, lo = 0;
    bool live;
    if (pair > 0) {
        p0 = warp * 2;  // pair index; S = pair is even, so p0 and p0 + 1 share a segment
        live = p0 < N / 2;
        const int seg = p0 / pair;
        lo = seg * 2 * pair + (p0 - seg * pair);
        rows[0] = lo, rows[1] = lo + 1, rows[2] = lo + pair, rows[3] = lo + pair + 1;
    } else {
        live = warp * kRows < N;
#pragma unroll
        for (int r = 0; r < kRows; ++r) rows[r] = warp * kRows + r;
    }
    const int chunks = K >> 3;
    const uint4* wrow[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)  // rows past N re-read the last row; their sums are dropped
        wrow[r] = reinterpret_cast<const uint4*>(w + (size_t)min(rows[r], N - 1) * K);

    // The first weight loads do not depend on the previous kernel: issue them before waiting.
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int c = lane + 32 * u;
#pragma unroll
        for (int r = 0; r < kRows; ++r)
            wv[u][r] = live && c < chunks ? load_stream(wrow[r] + c) : make_uint4(0, 0, 0, 0);
    }
    allow_next_kernel();
    wait_for_previous_kernel();

    const T* xs = x;
    if (norm_w != nullptr) {
        T* staged = reinterpret_cast<T*>(smem_raw);
        norm_into_shared<T>(x, norm_w, eps, staged, K);
        xs = staged;
    }
    if (!live) return;  // after the block-wide prologue: every warp took part in its barriers
    const uint4* xv = reinterpret_cast<const uint4*>(xs);

    // The epilogue's other inputs, loaded now so that their latency hides under the weight
    // stream: lane r < 4 the residual of its row (kResidual); lane t < 2 the position and its
    // pair's cos/sin (kRopeKV).
    int my_row = rows[0];
#pragma unroll
    for (int r = 1; r < kRows; ++r)
        if (lane == r) my_row = rows[r];
    float res_in = 0.0f;
    if (mode == kResidual && lane < kRows && my_row < N)
        res_in = widen(static_cast<const T*>(y)[my_row]);
    long long ps = 0;
    float rc = 1.0f, rs = 0.0f;
    if (mode == kRopeKV && lane < 2) {
        ps = pos[0];
        const int pp = p0 + lane, hh = pp / pair;
        if (ps >= 0 && ps < max_pos && hh < q_heads + kv_heads && pp < N / 2) {
            const long long at = ps * pair + (pp - hh * pair);
            rc = table_at(cos_table, at, table_kind);
            rs = table_at(sin_table, at, table_kind);
        }
    }

    float acc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;
    for (int c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
        // Next iteration's loads first, so they fly while this one's math runs.
        uint4 nx[kUnroll][kRows];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int c = c0 + 32 * kUnroll + 32 * u;
#pragma unroll
            for (int r = 0; r < kRows; ++r)
                nx[u][r] = c < chunks ? load_stream(wrow[r] + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int c = c0 + 32 * u;
            if (c < chunks) {
                float xf[8];
                unpack8<T>(xv[c], xf);
#pragma unroll
                for (int r = 0; r < kRows; ++r) {
                    float wf[8];
                    unpack8<T>(wv[u][r], wf);
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[r] = fmaf(xf[i], wf[i], acc[r]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
#pragma unroll
            for (int r = 0; r < kRows; ++r) wv[u][r] = nx[u][r];
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    // Every lane now holds the four sums.
#pragma unroll
    for (int r = 0; r < kRows; ++r)
        if (bias != nullptr && rows[r] < N) acc[r] += widen(bias[rows[r]]);

    if (mode == kStore || mode == kResidual) {
        if (lane >= kRows) return;
        float v = acc[0];
#pragma unroll
        for (int r = 1; r < kRows; ++r)
            if (lane == r) v = acc[r];
        const int row = my_row;
        if (row >= N) return;
        if (mode == kResidual) {
            static_cast<T*>(y)[row] = narrow<T>(rounded<T>(v) + res_in);
        } else if (f32out) {
            static_cast<float*>(y)[row] = v;
        } else {
            static_cast<T*>(y)[row] = narrow<T>(v);
        }
        return;
    }
    // Paired epilogues: lane t < 2 finishes pair p0 + t from rows lo + t and lo + S + t.
    if (lane >= 2) return;
    const int p = p0 + lane;
    if (p >= N / 2) return;
    const float x0 = rounded<T>(lane == 0 ? acc[0] : acc[1]);
    const float x1 = rounded<T>(lane == 0 ? acc[2] : acc[3]);
    if (mode == kSwiGLU) {
        static_cast<T*>(y)[p] = narrow<T>(x0 / (1.0f + expf(-x0)) * x1);
        return;
    }
    // kRopeKV: segment = head, j = the pair's index in the head.
    const int half = pair;
    const int h = p / half, j = p - h * half;
    const long long slot = ps % capacity;
    if (h >= q_heads && slot < 0) return;  // no cache row for a negative position
    if (h >= q_heads + kv_heads) {         // v: stored as is
        T* dst = v_cache + ((long long)(h - q_heads - kv_heads) * capacity + slot) * head_dim;
        dst[j] = narrow<T>(x0);
        dst[j + half] = narrow<T>(x1);
        return;
    }
    const float c = rc, s = rs;  // angle 0 outside [0, max_pos), as rope_<dtype>
    T* dst = h < q_heads ? static_cast<T*>(y) + (long long)h * head_dim
                         : k_cache + ((long long)(h - q_heads) * capacity + slot) * head_dim;
    dst[j] = narrow<T>(x0 * c - x1 * s);
    dst[j + half] = narrow<T>(x1 * c + x0 * s);
}

}  // namespace

#define PGK_DECODE_LINEAR(sfx, T)                                                                  \
    PGK_KERNEL_BOUNDS(                                                                             \
        decode_linear_##sfx,                                                                       \
        (const T* x, const T* norm_w, float eps, const T* w, const T* bias, void* y, T* k_cache,   \
         T* v_cache, const void* cos_table, const void* sin_table, const int* pos, int N, int K,   \
         int pair, int mode, int f32out, int q_heads, int kv_heads, int head_dim, int capacity,    \
         long long max_pos, int table_kind),                                                       \
        kWarps * 32) {                                                                             \
        decode_linear<T>(x, norm_w, eps, w, bias, y, k_cache, v_cache, cos_table, sin_table, pos,  \
                         N, K, pair, mode, f32out, q_heads, kv_heads, head_dim, capacity, max_pos, \
                         table_kind);                                                              \
    }
PGK_HALF_TYPES(PGK_DECODE_LINEAR)

// The step's bookkeeping in one thread (instead of five elementwise int32 kernels): the sampled
// token becomes the current one at position pos + 1, is recorded in history (when it fits), and
// the next step's cache length min(pos + 2, capacity) is set. The cache slot is derived from the
// position where it is used (pos % capacity).
PGK_KERNEL(decode_advance, (const int* next_token, int* token, int* pos, int* lens, int* history,
                            int max_len, int capacity)) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const int t = next_token[0];
    const int p = pos[0] + 1;
    pos[0] = p;
    token[0] = t;
    if (p >= 0 && p < max_len) history[p] = t;
    lens[0] = min(p + 1, capacity);
}

// Launch geometry the host side plans with.
PGK_CONSTANT(DECODE_LINEAR_WARPS, kWarps);
PGK_CONSTANT(DECODE_LINEAR_ROWS_PER_WARP, kRows);
