// Tensor-core implicit-GEMM 1-D convolution, for both directions (host side: ops/conv.py,
// ops/_conv_igemm.py). float16/bfloat16, mma.sync m16n8k16 with fp32 accumulators.
//
// The GEMM. Rows m (output channels, see below), columns n (output positions), reduction over
// (tap j, input channel c) in that order: Y[m, n] = bias + sum_{j, c} Wp[m, j, c] *
// x[c, n*stride - pad + j*dil]. Ordering the reduction tap-major makes the B operand of one tap
// a plain slice of the input window: the window is staged in shared memory position-major
// ([position][channel]), so the 8 channels a B fragment row needs are 16 contiguous bytes at any
// position, and ldmatrix reads them whatever the stride, dilation, padding or tap.
//
// conv_igemm_weights_<dtype> writes Wp [groups][rows][taps][cpad] once per call (a copy the
// size of the weight): the conv weight W[o, c, k] as Wp[o, k, c], channels zero-padded to the
// stage width; the transposed convolution's weight W[c, o, k] regrouped by output phase (below).
//
// The transposed convolution of stride s (dilation 1) is s interleaved ordinary convolutions:
// with u = t + padding = q*s + ph, y[o, t] = bias + sum_{c, i} W[c, o, ph + i*s] * x[c, q - i].
// So GEMM row m = o*s + ph, column q, taps j = J-1-i (J = ceil(K/s)), window stride 1, pad J-1,
// and the epilogue scatters row (o, ph), column q to y[o, q*s + ph - padding]: a CTA's rows hold
// whole output channels (all s phases), so its outputs are one contiguous run per channel.
//
// conv_igemm_<BN>_<dtype>: a CTA computes kBM rows x BN columns of one (batch, group) with 8
// warps (2 along M x 4 along N, 64 x BN/4 each). The reduction steps through stages of one tap
// x `chunk` channels (16, 32 or 64): the weight slice of a stage arrives by 16-byte cp.async,
// kStages deep; the input window of a channel chunk (every tap reads it) is double-buffered,
// fetched into registers while the previous chunk computes and transposed into shared memory
// after it. The epilogue adds the bias, stages the tile in shared memory and writes each output
// row as contiguous runs.
#include "layers.cuh"
#include "pygpukit/kernel.cuh"
#include "pygpukit/mma.cuh"

using namespace pgk_layers;

namespace pgk_igemm {

using namespace pgk;

constexpr int kThreads = 256;
constexpr int kBM = 128;
constexpr int kStages = 3;     // weight stages in flight
constexpr int kPairRegs = 16;  // window channel pairs a thread prefetches in registers
constexpr int kPad = 8;        // row padding (elements) of every shared tile: 16 bytes

// The problem as the kernel sees it (every size fits int32, checked on the host).
struct Geo {
    int cg;          // input channels per group
    int cpad;        // channels per group in Wp (a multiple of chunk)
    int rows;        // GEMM rows per group: og (conv) or og*up (transposed)
    int groups;      //
    int length;      // input length
    int cols;        // GEMM columns
    int taps;        // J
    int stride;      // of the window, in input positions per column
    int pad;         // input positions before column 0's window
    int dil;         // input positions between taps
    int chunk;       // channels per stage: 16, 32 or 64
    int win;         // window positions a CTA stages: (BN-1)*stride + (taps-1)*dil + 1
    int mrows;       // rows of an M tile: kBM (conv) or outs*up (transposed)
    int og;          // output channels per group
    int out_length;  //
    int up;          // 0: conv; s >= 1: transposed of stride s (row m = o*s + phase)
    int up_pad;      // the transposed convolution's padding
};

__device__ __forceinline__ unsigned pack_bits(unsigned short lo, unsigned short hi) {
    return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
}

template <typename T>
__device__ __forceinline__ unsigned short bits(T v) {
    return *reinterpret_cast<const unsigned short*>(&v);
}

// Issues the cp.async copies of stage `it`'s weight slice: rows [m0, m0 + mrows), tap j, channels
// [c0, c0 + chunk) of Wp into ws [kBM][chunk + kPad] (rows past the end are zero-filled).
template <typename T>
__device__ __forceinline__ void load_weights(T* ws, const T* __restrict__ wg, const Geo& d, int m0,
                                             int it) {
    const int ch = it / d.taps, j = it - ch * d.taps;
    const int vecs = d.chunk / 8;  // 16-byte vectors per row
    const int ap = d.chunk + kPad;
    for (int i = threadIdx.x; i < kBM * vecs; i += kThreads) {
        const int r = i / vecs, v = i - r * vecs;
        const bool valid = r < d.mrows && m0 + r < d.rows;
        const T* src = valid ? wg + (static_cast<long long>(m0 + r) * d.taps + j) * d.cpad +
                                   ch * d.chunk + v * 8
                             : wg;
        cp_async16(ws + r * ap + v * 8, src, valid);
    }
}

// The input window of one channel chunk: channel pairs (2p, 2p+1) at each of `win` positions,
// element i = threadIdx.x + k*kThreads as (pair i / win, position i % win), so consecutive
// threads read consecutive positions. `fetch` loads the first kPairRegs per thread into
// registers (issued before a chunk's math), `store` writes them and the rest (loaded then).
template <typename T>
struct Window {
    unsigned v[kPairRegs];

    __device__ __forceinline__ static unsigned at(const T* __restrict__ xg, const Geo& d, int c,
                                                  long long pos) {
        if (pos < 0 || pos >= d.length) return 0u;
        const T* p = xg + static_cast<long long>(c) * d.length + pos;
        const unsigned short lo = c < d.cg ? bits(p[0]) : 0;
        const unsigned short hi = c + 1 < d.cg ? bits(p[d.length]) : 0;
        return pack_bits(lo, hi);
    }
    __device__ __forceinline__ static void step(int& pair, int& p, int win) {
        p += kThreads;
        while (p >= win) {
            p -= win;
            ++pair;
        }
    }
    __device__ __forceinline__ void fetch(const T* __restrict__ xg, const Geo& d, int c0,
                                          long long pos0) {
        const int pairs = d.chunk / 2;
        int pair = threadIdx.x / d.win, p = threadIdx.x - pair * d.win;
#pragma unroll
        for (int k = 0; k < kPairRegs; ++k) {
            if (pair < pairs) v[k] = at(xg, d, c0 + 2 * pair, pos0 + p);
            step(pair, p, d.win);
        }
    }
    __device__ __forceinline__ void store(T* xs, const T* __restrict__ xg, const Geo& d, int c0,
                                          long long pos0) const {
        const int pairs = d.chunk / 2, xp = d.chunk + kPad;
        int pair = threadIdx.x / d.win, p = threadIdx.x - pair * d.win;
#pragma unroll
        for (int k = 0; k < kPairRegs; ++k) {
            if (pair < pairs) *reinterpret_cast<unsigned*>(xs + p * xp + 2 * pair) = v[k];
            step(pair, p, d.win);
        }
        for (; pair < pairs; step(pair, p, d.win))
            *reinterpret_cast<unsigned*>(xs + p * xp + 2 * pair) =
                at(xg, d, c0 + 2 * pair, pos0 + p);
    }
};

// One stage's products: chunk/16 k16 steps of one tap. A from ws by ldmatrix, B from the window
// by ldmatrix at positions n*stride + j*dil (two n8 fragments per x4 load).
template <typename T, int BN>
__device__ __forceinline__ void mma_stage(float (&acc)[4][BN / 32][4], const T* ws, const T* xs,
                                          const Geo& d, int j) {
    constexpr int NF = BN / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int pitch = d.chunk + kPad;
    const T* a_base = ws + (wm * 64 + (lane & 15)) * pitch + (lane >> 4) * 8;
    const int n_lane = wn * (BN / 4) + (lane >> 4) * 8 + (lane & 7);
    const T* b_base = xs + (n_lane * d.stride + j * d.dil) * pitch + ((lane >> 3) & 1) * 8;
    const int b_step = 16 * d.stride * pitch;  // 16 columns further
    for (int kk = 0; kk < d.chunk; kk += 16) {
        unsigned a[4][4];
#pragma unroll
        for (int mf = 0; mf < 4; ++mf) ldmatrix_x4(a[mf], a_base + mf * 16 * pitch + kk);
#pragma unroll
        for (int np = 0; np < NF / 2; ++np) {
            unsigned b[4];
            ldmatrix_x4(b, b_base + np * b_step + kk);
#pragma unroll
            for (int mf = 0; mf < 4; ++mf) {
                mma16816<T>(acc[mf][2 * np], a[mf], b[0], b[1]);
                mma16816<T>(acc[mf][2 * np + 1], a[mf], b[2], b[3]);
            }
        }
    }
}

template <int BN>
struct Smem {
    // Elements of T: kStages weight stages, then two windows; the epilogue tile reuses the start.
    static __device__ __forceinline__ int weight_stage(const Geo& d) {
        return kBM * (d.chunk + kPad);
    }
    static __device__ __forceinline__ int window(const Geo& d) { return d.win * (d.chunk + kPad); }
};

template <typename T, int BN>
__device__ __forceinline__ void conv_igemm(const T* __restrict__ x, const T* __restrict__ wp,
                                           const T* __restrict__ bias, T* __restrict__ y,
                                           const Geo d) {
    constexpr int NF = BN / 32;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    T* wstage = smem;
    T* wins = smem + kStages * Smem<BN>::weight_stage(d);
    const int wsz = Smem<BN>::weight_stage(d), xsz = Smem<BN>::window(d);

    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * d.mrows;
    const int bg = blockIdx.z, grp = bg % d.groups;
    const T* xg = x + static_cast<long long>(bg) * d.cg * d.length;
    const T* wg = wp + static_cast<long long>(grp) * d.rows * d.taps * d.cpad;
    const long long pos0 = static_cast<long long>(n0) * d.stride - d.pad;
    const int chunks = d.cpad / d.chunk, iters = chunks * d.taps;

    float acc[4][NF][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int k = 0; k < NF; ++k)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][k][e] = 0.0f;

    // Prologue: kStages - 1 weight stages in flight, the first window in place.
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < iters) load_weights(wstage + s * wsz, wg, d, m0, s);
        cp_async_commit();
    }
    Window<T> win;
    win.fetch(xg, d, 0, pos0);
    win.store(wins, xg, d, 0, pos0);

    for (int it = 0; it < iters; ++it) {
        const int ch = it / d.taps, j = it - ch * d.taps;
        asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2));
        __syncthreads();
        // The stage this iteration frees (it - 1's) takes it + kStages - 1's weights.
        const int next = it + kStages - 1;
        if (next < iters) load_weights(wstage + (next % kStages) * wsz, wg, d, m0, next);
        cp_async_commit();
        const bool more = ch + 1 < chunks;
        if (more && j == 0) win.fetch(xg, d, (ch + 1) * d.chunk, pos0);
        mma_stage<T, BN>(acc, wstage + (it % kStages) * wsz, wins + (ch & 1) * xsz, d, j);
        // Every thread left the other window at this chunk's first barrier.
        if (more && j == d.taps - 1)
            win.store(wins + ((ch + 1) & 1) * xsz, xg, d, (ch + 1) * d.chunk, pos0);
    }
    cp_async_wait_all();
    __syncthreads();

    // Epilogue: bias, the tile in shared memory as T, then contiguous output runs.
    const int yp = BN + kPad;
    T* ys = smem;
    {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const int wm = warp >> 2, wn = warp & 3, g = lane >> 2, q = lane & 3;
#pragma unroll
        for (int mf = 0; mf < 4; ++mf)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = wm * 64 + mf * 16 + g + 8 * h;
                const int m = m0 + r;
                const int o = d.up ? m / d.up : m;
                const bool has = bias != nullptr && r < d.mrows && o < d.og;
                const float bo = has ? widen(bias[grp * d.og + o]) : 0.0f;
#pragma unroll
                for (int nf = 0; nf < NF; ++nf) {
                    const int c = wn * (BN / 4) + nf * 8 + 2 * q;
                    const unsigned v = pack_bits(bits(narrow<T>(acc[mf][nf][2 * h] + bo)),
                                                 bits(narrow<T>(acc[mf][nf][2 * h + 1] + bo)));
                    *reinterpret_cast<unsigned*>(ys + r * yp + c) = v;
                }
            }
    }
    __syncthreads();
    T* yg = y + static_cast<long long>(bg) * d.og * d.out_length;
    if (d.up == 0) {
        const int nrows = min(d.mrows, d.og - m0), ncols = min(BN, d.out_length - n0);
        for (int i = threadIdx.x; i < nrows * BN; i += kThreads) {
            const int r = i / BN, c = i - r * BN;
            if (c < ncols)
                yg[static_cast<long long>(m0 + r) * d.out_length + n0 + c] = ys[r * yp + c];
        }
    } else {
        const int s = d.up, outs = d.mrows / s, o0 = m0 / s;
        const int nouts = min(outs, d.og - o0);
        const long long t_lo = max(0LL, static_cast<long long>(n0) * s - d.up_pad);
        const long long t_hi = min(static_cast<long long>(d.out_length),
                                   static_cast<long long>(n0 + BN) * s - d.up_pad);
        const int span = static_cast<int>(max(0LL, t_hi - t_lo));
        for (int i = threadIdx.x; i < nouts * span; i += kThreads) {
            const int ol = i / span;
            const long long t = t_lo + (i - ol * span);
            const long long u = t + d.up_pad;
            const int qn = static_cast<int>(u / s) - n0, ph = static_cast<int>(u % s);
            yg[static_cast<long long>(o0 + ol) * d.out_length + t] = ys[(ol * s + ph) * yp + qn];
        }
    }
}

// Wp [groups][rows][taps][cpad] from the conv weight [G*og, cg, K] (up == 0) or the transposed
// weight [G*cg, og, K] (up = stride >= 1): zero where a channel is padding or a phase's tap falls
// past the kernel.
template <typename T>
__device__ __forceinline__ void prepare_weights(const T* __restrict__ w, T* __restrict__ wp,
                                                long long total, int cg, int cpad, int og, int rows,
                                                int taps, int kernel, int up) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(i % cpad);
        long long r = i / cpad;
        const int j = static_cast<int>(r % taps);
        r /= taps;
        const int m = static_cast<int>(r % rows);
        const long long g = r / rows;
        T v = narrow<T>(0.0f);
        if (c < cg) {
            if (up == 0) {
                v = w[((g * og + m) * cg + c) * kernel + j];
            } else {
                const int o = m / up, ph = m - o * up;
                const int k = ph + (taps - 1 - j) * up;
                if (k < kernel) v = w[((g * cg + c) * og + o) * static_cast<long long>(kernel) + k];
            }
        }
        wp[i] = v;
    }
}

}  // namespace pgk_igemm

#define PGK_IGEMM_PARAMS                                                                         \
    int cg, int cpad, int rows, int groups, int length, int cols, int taps, int stride, int pad, \
        int dil, int chunk, int win, int mrows, int og, int out_length, int up, int up_pad
#define PGK_IGEMM_GEO                                                                        \
    pgk_igemm::Geo {                                                                         \
        cg, cpad, rows, groups, length, cols, taps, stride, pad, dil, chunk, win, mrows, og, \
            out_length, up, up_pad                                                           \
    }

#define PGK_IGEMM_TILE(sfx, T, BN)                                                      \
    PGK_KERNEL_BOUNDS(conv_igemm_##BN##_##sfx,                                          \
                      (const T* x, const T* wp, const T* bias, T* y, PGK_IGEMM_PARAMS), \
                      pgk_igemm::kThreads, 2) {                                         \
        pgk_igemm::conv_igemm<T, BN>(x, wp, bias, y, PGK_IGEMM_GEO);                    \
    }
#define PGK_IGEMM(sfx, T)                                                                       \
    PGK_IGEMM_TILE(sfx, T, 64)                                                                  \
    PGK_IGEMM_TILE(sfx, T, 128)                                                                 \
    PGK_KERNEL(conv_igemm_weights_##sfx, (const T* w, T* wp, long long total, int cg, int cpad, \
                                          int og, int rows, int taps, int kernel, int up)) {    \
        pgk_igemm::prepare_weights<T>(w, wp, total, cg, cpad, og, rows, taps, kernel, up);      \
    }
PGK_HALF_TYPES(PGK_IGEMM)

PGK_CONSTANT(CONV_IGEMM_THREADS, pgk_igemm::kThreads);
PGK_CONSTANT(CONV_IGEMM_BM, pgk_igemm::kBM);
PGK_CONSTANT(CONV_IGEMM_STAGES, pgk_igemm::kStages);
PGK_CONSTANT(CONV_IGEMM_PAD, pgk_igemm::kPad);
PGK_CONSTANT(CONV_IGEMM_BLOCK, 256);
