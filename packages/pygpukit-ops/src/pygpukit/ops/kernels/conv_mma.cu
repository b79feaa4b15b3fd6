// Tensor-core 1-D convolution and transposed convolution (host side:
// ops/conv.py, _conv_mma.py). Implicit GEMM: no im2col or column buffer in global memory, one
// launch per call, bias added in the epilogue, fp32 accumulation (mma.sync m16n8k16 for the
// 16-bit types; float32 as 3xTF32 m16n8k8, accurate to float32 rounding).
//
// conv_mma_<BM>x<BN>_<dtype>: y[b, g*Og + o, t] = bias + sum_{c, k} W[o, c, k] *
//   x[b, g*Cg + c, t*stride - pad + k*dil]. A CTA computes BM output channels x BN positions of
//   one (batch, group). The reduction runs over chunks of `chunk` input channels (16 or more,
//   chosen on the host): per chunk the CTA copies the weights W[o0.., c0..c0+chunk, :] (a
//   contiguous run of chunk*K values per
//   output channel, reduction index r = c*K + k exactly as the weight is stored) and the input
//   window x[c0.., (t0*stride - pad) ..] that those BN outputs read into shared memory. The A
//   fragments (weights) come from ldmatrix; the B fragments (x) are gathered from the window with
//   a per-r offset table (c*pitch + k*dil), so stride, dilation and padding cost nothing extra.
//
// conv_transpose_mma_<dtype>: the transposed convolution as cols[(o, k), l] = sum_c W[c, o, k] *
//   x[c, l] (a GEMM whose A is the weight read in place: [C_in, Og*K] is column-major A) over a
//   tile of BN input positions, followed by the overlap-add in shared memory: y[o, t] = bias +
//   sum_k cols[(o, k), (t + pad - k*dil) / stride] where that divides. A CTA holds kTransRows
//   rows = floor(kTransRows / K) whole output channels and BN positions; consecutive tiles
//   overlap by `halo` = ceil((K-1)*dil / stride) positions so each output reads one tile only
//   (each output belongs to exactly one tile: see _conv_mma.py's TransposeTiles).
//
// Both: 4 warps; double-buffered chunks (cp.async for 16-byte aligned weight rows, plain loads
// otherwise; the input window through registers, loaded while the previous chunk computes).
#include "layers.cuh"
#include "pygpukit/kernel.cuh"
#include "pygpukit/mma.cuh"

using namespace pgk_layers;

namespace pgk_conv {

using namespace pgk;

constexpr int kThreads = 128;
constexpr int kChunkUnit = 16;   // the chunk of input channels per stage is a multiple of this
constexpr int kWindowRegs = 32;  // window elements a thread prefetches in registers
constexpr int kTransRows = 80;   // rows (o, k) of a transposed-convolution CTA
constexpr int kTransCols = 64;   // input positions of a transposed-convolution CTA

// 4-byte global -> shared copy (zero-fills when !valid): weight rows aligned to 4 bytes only.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}

// How a CTA copies weight rows: 16-byte cp.async where every row (and the base) is 16-byte
// aligned, 4-byte cp.async where they are 4-byte aligned, else plain loads.
template <typename T>
__device__ __forceinline__ int weight_copy_width(const T* w, long long row_len, int tile_cols) {
    const size_t base = reinterpret_cast<size_t>(w);
    constexpr int v16 = 16 / sizeof(T), v4 = 4 / sizeof(T);
    if (row_len % v16 == 0 && tile_cols % v16 == 0 && (base & 15) == 0) return 16;
    if (row_len % v4 == 0 && tile_cols % v4 == 0 && (base & 3) == 0) return 4;
    return 0;
}

// float32 on tensor cores without TF32's loss: each operand is split into a TF32 high part and
// a TF32 remainder, and a*b is summed as lo*hi + hi*lo + hi*hi (the "3xTF32" scheme; the
// dropped lo*lo term is below float32's rounding), in fp32 accumulators.
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}
// D (16x8 fp32) += A (16x8 tf32, row-major) * B (8x8 tf32, column-major).
__device__ __forceinline__ void mma1688(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                        unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <typename T>
__device__ __forceinline__ unsigned pack2(T lo, T hi) {
    const unsigned short l = *reinterpret_cast<const unsigned short*>(&lo);
    const unsigned short h = *reinterpret_cast<const unsigned short*>(&hi);
    return static_cast<unsigned>(l) | (static_cast<unsigned>(h) << 16);
}

// The problem, as the kernels see it (plain ints: every size fits int32, checked on the host).
struct Dims {
    int cg;  // input channels per group
    int og;  // output channels per group
    int groups;
    int length;  // input length
    int out_length;
    int kernel;  // taps
    int stride, pad, dil;
    int pitch;   // window row pitch in shared memory (elements, a multiple of 8)
    int win;     // window length (elements actually loaded per channel)
    int wpitch;  // weight tile row pitch (elements, a multiple of 8)
    int rows;    // weight tile rows used: BM (conv) or outs*K (transposed)
    int outs;    // output channels per CTA (transposed)
    int halo;    // tile overlap (transposed)
    int chunk;   // input channels per pipeline stage (a multiple of kChunkUnit)
};

// Shared-memory layout of one pipeline stage: the weight tile, then the input window.
template <int BM, bool TRANS>
struct Stage {
    // conv: [BM][wpitch] (r = c*K + k contiguous); transposed: [chunk][wpitch] (rows c).
    static __device__ __forceinline__ int weight_elems(const Dims& d) {
        return (TRANS ? d.chunk : BM) * d.wpitch;
    }
    static __device__ __forceinline__ int elems(const Dims& d) {
        return weight_elems(d) + d.chunk * d.pitch;
    }
};

// Copies rows x cols of a row-major global matrix into `ws` (row pitch `pitch`), `E` elements a
// copy (16-byte cp.async, 4-byte cp.async, or E == 1: plain loads and stores); out-of-range
// values are zeros. `row_limit` rows and `col_end` columns are valid; ncols is a multiple of E.
template <typename T, int E>
__device__ __forceinline__ void copy_tile(T* ws, const T* __restrict__ w, int pitch, int nrows,
                                          int ncols, int row_limit, long long col_end,
                                          long long row_base, long long row_len, long long col0) {
    const int units = ncols / E;
    for (int i = threadIdx.x; i < nrows * units; i += kThreads) {
        const int row = i / units, cc = (i - row * units) * E;
        const bool valid = row < row_limit && cc < col_end;
        const T* src = valid ? w + (row_base + row) * row_len + col0 + cc : w;
        T* dst = ws + row * pitch + cc;
        if constexpr (E * sizeof(T) == 16) {
            cp_async16(dst, src, valid);
        } else if constexpr (E * sizeof(T) == 4) {
            cp_async4(dst, src, valid);
        } else {
            *dst = valid ? *src : narrow<T>(0.0f);
        }
    }
}

// Copies one chunk's weights into `ws`. conv: rows o (BM), columns r in [0, chunk*K) from
// W[(grp*og + o0 + o), c0*K + r]; transposed: rows c (chunk), columns m in [0, rows) from
// W[(grp*cg + c0 + c), o0*K + m]. Out-of-range values are zeros. `vec` is the copy width in
// bytes (weight_copy_width), 0 for plain loads.
template <typename T, int BM, bool TRANS>
__device__ __forceinline__ void load_weights(T* ws, const T* __restrict__ w, const Dims& d, int grp,
                                             int o0, int c0, int vec) {
    const int nrows = TRANS ? d.chunk : BM;
    const int ncols = TRANS ? d.rows : d.chunk * d.kernel;
    const long long row_len =
        TRANS ? static_cast<long long>(d.og) * d.kernel : static_cast<long long>(d.cg) * d.kernel;
    // Valid extent of a row and of the columns in it.
    const long long col0 =
        TRANS ? static_cast<long long>(o0) * d.kernel : static_cast<long long>(c0) * d.kernel;
    const int row_limit = TRANS ? min(d.chunk, d.cg - c0) : min(BM, d.og - o0);
    const long long row_base =
        TRANS ? static_cast<long long>(grp) * d.cg + c0 : static_cast<long long>(grp) * d.og + o0;
    const long long col_end = min(row_len - col0, static_cast<long long>(ncols));
    if (vec == 16) {
        copy_tile<T, 16 / sizeof(T)>(ws, w, d.wpitch, nrows, ncols, row_limit, col_end, row_base,
                                     row_len, col0);
    } else if (vec == 4) {
        copy_tile<T, 4 / sizeof(T)>(ws, w, d.wpitch, nrows, ncols, row_limit, col_end, row_base,
                                    row_len, col0);
    } else {
        copy_tile<T, 1>(ws, w, d.wpitch, nrows, ncols, row_limit, col_end, row_base, row_len, col0);
    }
}

// The input window of one chunk, in two halves: `fetch` loads up to kWindowRegs elements per
// thread into registers (issued before the previous chunk's math), `store` writes them (and any
// rest, loaded synchronously) after it.
template <typename T>
struct Window {
    T v[kWindowRegs];

    __device__ __forceinline__ static T at(const T* __restrict__ xrow, int c_valid, int c,
                                           long long pos, int length) {
        return (c < c_valid && pos >= 0 && pos < length)
                   ? xrow[c * static_cast<long long>(length) + pos]
                   : narrow<T>(0.0f);
    }

    // Element i = threadIdx.x + j*kThreads of the [chunk][win] window is (c, p): one division
    // for j = 0, then stepped (p += kThreads, wrapping into the next rows) without dividing.
    __device__ __forceinline__ static void step(int& c, int& p, int win) {
        p += kThreads;
        while (p >= win) {
            p -= win;
            ++c;
        }
    }

    __device__ __forceinline__ void fetch(const T* __restrict__ xrow, int c_valid, long long pos0,
                                          const Dims& d) {
        int c = threadIdx.x / d.win, p = threadIdx.x - c * d.win;
#pragma unroll
        for (int j = 0; j < kWindowRegs; ++j) {
            if (c < d.chunk) v[j] = at(xrow, c_valid, c, pos0 + p, d.length);
            step(c, p, d.win);
        }
    }

    __device__ __forceinline__ void store(T* xs, const T* __restrict__ xrow, int c_valid,
                                          long long pos0, const Dims& d) const {
        int c = threadIdx.x / d.win, p = threadIdx.x - c * d.win;
#pragma unroll
        for (int j = 0; j < kWindowRegs; ++j) {
            if (c < d.chunk) xs[c * d.pitch + p] = v[j];
            step(c, p, d.win);
        }
        for (; c < d.chunk; step(c, p, d.win))
            xs[c * d.pitch + p] = at(xrow, c_valid, c, pos0 + p, d.length);
    }
};

// One chunk's products on 16-bit operands: k16 steps of mma.sync m16n8k16. A (weights) through
// ldmatrix (transposed for the transposed convolution's column-major A), B gathered from the
// window: b = x_window[offs[r] + n*col_step].
template <typename T, int BM, int BN, bool TRANS>
__device__ __forceinline__ void mma_chunk_16(float (&acc)[BM / 16][BN / 32][4], const T* ws,
                                             const T* xs, const int* offs, const Dims& d,
                                             int ksteps, int n_base, int col_step) {
    constexpr int MF = BM / 16, NF = BN / 32;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, q = lane & 3;
    for (int ks = 0; ks < ksteps; ++ks) {
        const int r0 = ks * 16 + 2 * q;
        const int o_a = offs[r0], o_b = offs[r0 + 1], o_c = offs[r0 + 8], o_d = offs[r0 + 9];
        unsigned a[MF][4];
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) {
            if (TRANS) {
                const int j = lane >> 3, rr = lane & 7;
                ldmatrix_x4_trans(
                    a[mf], ws + (ks * 16 + rr + 8 * (j >> 1)) * d.wpitch + mf * 16 + 8 * (j & 1));
            } else {
                ldmatrix_x4(a[mf],
                            ws + (mf * 16 + (lane & 15)) * d.wpitch + ks * 16 + (lane >> 4) * 8);
            }
        }
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
            const int pos = (n_base + nf * 8 + g) * col_step;
            const unsigned b0 = pack2(xs[o_a + pos], xs[o_b + pos]);
            const unsigned b1 = pack2(xs[o_c + pos], xs[o_d + pos]);
#pragma unroll
            for (int mf = 0; mf < MF; ++mf) mma16816<T>(acc[mf][nf], a[mf], b0, b1);
        }
    }
}

// One chunk's products on float32 operands: k8 steps of 3xTF32 mma.sync m16n8k8 (fragments
// read with 32-bit shared loads; the row pitches keep the 8x4 lanes on distinct banks).
template <int BM, int BN, bool TRANS>
__device__ __forceinline__ void mma_chunk_f32(float (&acc)[BM / 16][BN / 32][4], const float* ws,
                                              const float* xs, const int* offs, const Dims& d,
                                              int ksteps, int n_base, int col_step) {
    constexpr int MF = BM / 16, NF = BN / 32;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, q = lane & 3;
    for (int ks = 0; ks < ksteps; ++ks) {
        const int r = ks * 8 + q;
        const int o_lo = offs[r], o_hi = offs[r + 4];
        unsigned ah[MF][4], al[MF][4];
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) {
            const int m = mf * 16 + g;
            float v[4];
            if (TRANS) {  // A[m][c] = ws[c][m]
                v[0] = ws[r * d.wpitch + m];
                v[1] = ws[r * d.wpitch + m + 8];
                v[2] = ws[(r + 4) * d.wpitch + m];
                v[3] = ws[(r + 4) * d.wpitch + m + 8];
            } else {
                v[0] = ws[m * d.wpitch + r];
                v[1] = ws[(m + 8) * d.wpitch + r];
                v[2] = ws[m * d.wpitch + r + 4];
                v[3] = ws[(m + 8) * d.wpitch + r + 4];
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) split_tf32(v[e], ah[mf][e], al[mf][e]);
        }
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
            const int pos = (n_base + nf * 8 + g) * col_step;
            unsigned bh0, bl0, bh1, bl1;
            split_tf32(xs[o_lo + pos], bh0, bl0);
            split_tf32(xs[o_hi + pos], bh1, bl1);
#pragma unroll
            for (int mf = 0; mf < MF; ++mf) {
                mma1688(acc[mf][nf], al[mf], bh0, bh1);
                mma1688(acc[mf][nf], ah[mf], bl0, bl1);
                mma1688(acc[mf][nf], ah[mf], bh0, bh1);
            }
        }
    }
}

// The GEMM over every channel chunk, accumulating into acc[MF][NF][4]. Warps split the BN
// columns (warp n0 = warp * BN/4), each covering all BM rows.
template <typename T, int BM, int BN, bool TRANS>
__device__ __forceinline__ void gemm(float (&acc)[BM / 16][BN / 32][4], T* smem, const int* offs,
                                     const T* __restrict__ x, const T* __restrict__ w,
                                     const Dims& d, int grp, int o0, long long pos0, int col_step,
                                     int vec) {
    const int warp = threadIdx.x >> 5;
    const int stage_elems = Stage<BM, TRANS>::elems(d);
    const int wel = Stage<BM, TRANS>::weight_elems(d);
    const int ksteps = (TRANS ? d.chunk : d.chunk * d.kernel) / 16;  // k16 steps per chunk
    const int chunks = (d.cg + d.chunk - 1) / d.chunk;
    const T* xg = x;  // x of this (batch, group), channel 0
    const int n_base = warp * (BN / 4);

    Window<T> win;
    load_weights<T, BM, TRANS>(smem, w, d, grp, o0, 0, vec);
    cp_async_commit();
    win.fetch(xg, d.cg, pos0, d);
    win.store(smem + wel, xg, d.cg, pos0, d);

    for (int ch = 0; ch < chunks; ++ch) {
        cp_async_wait_all();
        __syncthreads();
        T* cur = smem + (ch & 1) * stage_elems;
        T* nxt = smem + ((ch + 1) & 1) * stage_elems;
        const bool more = ch + 1 < chunks;
        const int c1 = (ch + 1) * d.chunk;
        const T* xn = xg + static_cast<long long>(c1) * d.length;
        if (more) {
            load_weights<T, BM, TRANS>(nxt, w, d, grp, o0, c1, vec);
            cp_async_commit();
            win.fetch(xn, d.cg - c1, pos0, d);
        }
        const T* ws = cur;
        const T* xs = cur + wel;
        if constexpr (sizeof(T) == 4) {
            mma_chunk_f32<BM, BN, TRANS>(acc, ws, xs, offs, d, 2 * ksteps, n_base, col_step);
        } else {
            mma_chunk_16<T, BM, BN, TRANS>(acc, ws, xs, offs, d, ksteps, n_base, col_step);
        }
        if (more) win.store(nxt + wel, xn, d.cg - c1, pos0, d);
    }
}

// offs[r] for r in [0, chunk*K): the window offset of reduction index r = c*K + k.
__device__ __forceinline__ void fill_offsets(int* offs, const Dims& d, bool trans) {
    const int n = trans ? d.chunk : d.chunk * d.kernel;
    for (int r = threadIdx.x; r < n; r += kThreads) {
        const int c = trans ? r : r / d.kernel;
        const int k = trans ? 0 : r - c * d.kernel;
        offs[r] = c * d.pitch + k * d.dil;
    }
}

template <typename T, int BM, int BN>
__device__ __forceinline__ void conv_mma(const T* __restrict__ x, const T* __restrict__ w,
                                         const T* __restrict__ bias, T* __restrict__ y,
                                         const Dims d) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const int stage_elems = Stage<BM, false>::elems(d);
    int* offs = reinterpret_cast<int*>(smem + 2 * stage_elems);
    fill_offsets(offs, d, false);

    const int t0 = blockIdx.x * BN, o0 = blockIdx.y * BM;
    const int bg = blockIdx.z, grp = bg % d.groups, b = bg / d.groups;
    const T* xg = x + (static_cast<long long>(b) * d.groups + grp) * d.cg * d.length;
    const long long pos0 = static_cast<long long>(t0) * d.stride - d.pad;
    // Row length cg*K; a chunk starts at c0*K, a multiple of 16*K.
    const int vec = weight_copy_width(w, static_cast<long long>(d.cg) * d.kernel, 8);

    constexpr int MF = BM / 16, NF = BN / 32;
    float acc[MF][NF][4];
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
        for (int j = 0; j < NF; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    __syncthreads();  // offsets
    gemm<T, BM, BN, false>(acc, smem, offs, xg, w, d, grp, o0, pos0, d.stride, vec);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    T* yg = y + (static_cast<long long>(b) * d.groups + grp) * d.og * d.out_length;
#pragma unroll
    for (int mf = 0; mf < MF; ++mf) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int o = o0 + mf * 16 + g + 8 * h;
            if (o >= d.og) continue;
            const float bo = bias != nullptr ? widen(bias[grp * d.og + o]) : 0.0f;
            T* row = yg + static_cast<long long>(o) * d.out_length;
#pragma unroll
            for (int nf = 0; nf < NF; ++nf) {
                const int t = t0 + warp * (BN / 4) + nf * 8 + 2 * q;
                if (t < d.out_length) row[t] = narrow<T>(acc[mf][nf][2 * h] + bo);
                if (t + 1 < d.out_length) row[t + 1] = narrow<T>(acc[mf][nf][2 * h + 1] + bo);
            }
        }
    }
}

template <typename T>
__device__ __forceinline__ void conv_transpose_mma(const T* __restrict__ x, const T* __restrict__ w,
                                                   const T* __restrict__ bias, T* __restrict__ y,
                                                   const Dims d) {
    constexpr int BM = kTransRows, BN = kTransCols;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const int stage_elems = Stage<BM, true>::elems(d);
    // The offsets after both stages, the fp32 column tile (epilogue) over everything before it.
    int* offs = reinterpret_cast<int*>(smem + 2 * stage_elems);
    fill_offsets(offs, d, true);

    const int tile = blockIdx.x, step = BN - d.halo;
    const int l0 = tile * step;
    const int o0 = blockIdx.y * d.outs;
    const int bg = blockIdx.z, grp = bg % d.groups, b = bg / d.groups;
    const T* xg = x + (static_cast<long long>(b) * d.groups + grp) * d.cg * d.length;
    // Row length og*K; a tile starts at o0*K, a multiple of rows.
    const int vec = weight_copy_width(w, static_cast<long long>(d.og) * d.kernel, d.rows);
    constexpr int MF = BM / 16, NF = BN / 32;
    float acc[MF][NF][4];
#pragma unroll
    for (int i = 0; i < MF; ++i)
#pragma unroll
        for (int j = 0; j < NF; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    __syncthreads();
    gemm<T, BM, BN, true>(acc, smem, offs, xg, w, d, grp, o0, l0, 1, vec);

    // Stage the columns in shared memory (fp32), then overlap-add them into the outputs.
    __syncthreads();
    float* cols = reinterpret_cast<float*>(smem_raw);
    constexpr int CP = BN + 4;  // fp32 row pitch
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) {
            const int n = warp * (BN / 4) + nf * 8 + 2 * q;
            const int m = mf * 16 + g;
            cols[m * CP + n] = acc[mf][nf][0];
            cols[m * CP + n + 1] = acc[mf][nf][1];
            cols[(m + 8) * CP + n] = acc[mf][nf][2];
            cols[(m + 8) * CP + n + 1] = acc[mf][nf][3];
        }
    __syncthreads();

    // This tile's outputs: [t_begin, t_end) (see TransposeTiles on the host).
    const long long s = d.stride;
    auto first_output = [&](int i) -> long long {
        if (i == 0) return 0;
        const long long v = static_cast<long long>(i) * step + d.halo;
        if (v > d.length - 1) return d.out_length;
        return min(static_cast<long long>(d.out_length), max(0LL, v * s - d.pad));
    };
    const long long t_begin = first_output(tile), t_end = first_output(tile + 1);
    const int outs = min(d.outs, d.og - o0);
    const long long span = t_end - t_begin;
    T* yg = y + (static_cast<long long>(b) * d.groups + grp) * d.og * d.out_length;
    for (long long i = threadIdx.x; i < outs * span; i += kThreads) {
        const int ol = static_cast<int>(i / span);
        const long long t = t_begin + (i - ol * span);
        const int o = o0 + ol;
        float sum = bias != nullptr ? widen(bias[grp * d.og + o]) : 0.0f;
        for (int k = 0; k < d.kernel; ++k) {
            const long long num = t + d.pad - static_cast<long long>(k) * d.dil;
            if (num < 0) break;  // k only grows
            if (num % s != 0) continue;
            const long long l = num / s;
            if (l < d.length) sum += cols[(ol * d.kernel + k) * CP + static_cast<int>(l - l0)];
        }
        yg[static_cast<long long>(o) * d.out_length + t] = narrow<T>(sum);
    }
}

}  // namespace pgk_conv

#define PGK_CONV_DIMS_PARAMS                                                                 \
    int cg, int og, int groups, int length, int out_length, int kernel, int stride, int pad, \
        int dil, int pitch, int win, int wpitch, int rows, int outs, int halo, int chunk
#define PGK_CONV_DIMS                                                                           \
    pgk_conv::Dims {                                                                            \
        cg, og, groups, length, out_length, kernel, stride, pad, dil, pitch, win, wpitch, rows, \
            outs, halo, chunk                                                                   \
    }

#define PGK_CONV_MMA_TILE(sfx, T, BM, BN)                                                  \
    PGK_KERNEL_BOUNDS(conv_mma_##BM##x##BN##_##sfx,                                        \
                      (const T* x, const T* w, const T* bias, T* y, PGK_CONV_DIMS_PARAMS), \
                      pgk_conv::kThreads) {                                                \
        pgk_conv::conv_mma<T, BM, BN>(x, w, bias, y, PGK_CONV_DIMS);                       \
    }
#define PGK_CONV_MMA(sfx, T)                                                               \
    PGK_CONV_MMA_TILE(sfx, T, 64, 64)                                                      \
    PGK_CONV_MMA_TILE(sfx, T, 64, 128)                                                     \
    PGK_CONV_MMA_TILE(sfx, T, 128, 64)                                                     \
    PGK_KERNEL_BOUNDS(conv_transpose_mma_##sfx,                                            \
                      (const T* x, const T* w, const T* bias, T* y, PGK_CONV_DIMS_PARAMS), \
                      pgk_conv::kThreads) {                                                \
        pgk_conv::conv_transpose_mma<T>(x, w, bias, y, PGK_CONV_DIMS);                     \
    }
PGK_FLOAT_TYPES(PGK_CONV_MMA)

PGK_CONSTANT(CONV_MMA_THREADS, pgk_conv::kThreads);
PGK_CONSTANT(CONV_MMA_CHUNK_UNIT, pgk_conv::kChunkUnit);
PGK_CONSTANT(CONV_MMA_TRANS_ROWS, pgk_conv::kTransRows);
PGK_CONSTANT(CONV_MMA_TRANS_COLS, pgk_conv::kTransCols);
