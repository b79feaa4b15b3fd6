// A (bidirectional) LSTM layer, PyTorch's gate order i, f, g, o (host side: ops/recurrent.py).
// The input projections of every step, xw = x @ W_ih^T, come from one matmul per direction
// before the recurrence; the kernels here add the recurrent part and update the state:
//
//   gates = xw[t] + b_ih + b_hh + h @ W_hh^T        (four rows of W_hh per hidden unit)
//   c = sigmoid(f) * c + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)
//
// Two kernels, the same arithmetic (float32 state and accumulation, whatever the dtype):
// - lstm_sequence_*: the whole sequence in one launch (SM 9.0+, hidden <= 256), W_hh held in
//   registers across a thread-block cluster, h exchanged through distributed shared memory.
// - lstm_step_*: one launch per time step (every other case).
// With `lengths`, a batch row whose sequence has ended (t >= lengths[b]) keeps its state and
// outputs zeros, as PyTorch's packed sequences do (the reverse direction then starts at the
// row's last real step).
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

constexpr int kGates = 4;
// Batch rows whose gate sums a block holds in shared memory at once.
constexpr int kBatchChunk = 32;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// ---- One launch per time step ------------------------------------------------------------
// Grid (hidden, directions): block (j, d) owns hidden unit j of direction d for the whole batch;
// its four warps take the four gates, each warp one dot product of a W_hh row with h per batch
// row (lanes over the hidden axis, shuffle-reduced). Direction 1 walks time backwards. h is
// double-buffered (h_in of the previous step, h_out of this one, swapped by the host) because
// other blocks still read h_in; c is owned by one thread and updated in place.
template <typename T>
__device__ __forceinline__ void lstm_step(
    const T* __restrict__ xw, const T* __restrict__ w_hh0, const T* __restrict__ w_hh1,
    const T* __restrict__ b_ih0, const T* __restrict__ b_ih1, const T* __restrict__ b_hh0,
    const T* __restrict__ b_hh1, const float* __restrict__ h_in, float* __restrict__ h_out,
    float* __restrict__ c, T* __restrict__ y, const int* __restrict__ lengths, int batch, int steps,
    int hidden, int dirs, int step, long long row_b, long long row_t) {
    __shared__ float pre[kGates][kBatchChunk];
    const int j = blockIdx.x;
    const int d = blockIdx.y;
    const int gate = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int t = d == 0 ? step : steps - 1 - step;
    const T* w_hh = d == 0 ? w_hh0 : w_hh1;
    const T* b_ih = d == 0 ? b_ih0 : b_ih1;
    const T* b_hh = d == 0 ? b_hh0 : b_hh1;
    const T* w = w_hh + (static_cast<long long>(gate) * hidden + j) * hidden;
    const long long gate_width = static_cast<long long>(kGates) * hidden;
    const long long rows = static_cast<long long>(batch) * steps;

    for (int b0 = 0; b0 < batch; b0 += kBatchChunk) {
        const int chunk = min(kBatchChunk, batch - b0);
        for (int bi = 0; bi < chunk; ++bi) {
            const float* h = h_in + (static_cast<long long>(d) * batch + b0 + bi) * hidden;
            float acc = 0.0f;
            for (int k = lane; k < hidden; k += 32) acc += widen(w[k]) * h[k];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (lane == 0) pre[gate][bi] = acc;
        }
        __syncthreads();
        if (threadIdx.x < chunk) {
            const int b = b0 + threadIdx.x;
            const long long state = (static_cast<long long>(d) * batch + b) * hidden + j;
            const long long row = b * row_b + t * row_t;
            T* out = y + row * dirs * hidden + static_cast<long long>(d) * hidden + j;
            if (lengths == nullptr || t < lengths[b]) {
                const T* x = xw + (static_cast<long long>(d) * rows + row) * gate_width;
                float g[kGates];
#pragma unroll
                for (int q = 0; q < kGates; ++q) {
                    const int r = q * hidden + j;
                    g[q] = pre[q][threadIdx.x] + widen(x[r]);
                    if (b_ih != nullptr) g[q] += widen(b_ih[r]);
                    if (b_hh != nullptr) g[q] += widen(b_hh[r]);
                }
                const float cell = sigmoid(g[1]) * c[state] + sigmoid(g[0]) * tanhf(g[2]);
                const float hid = sigmoid(g[3]) * tanhf(cell);
                c[state] = cell;
                h_out[state] = hid;
                *out = narrow<T>(hid);
            } else {
                h_out[state] = h_in[state];
                *out = narrow<T>(0.0f);
            }
        }
        __syncthreads();
    }
}

#define PGK_LSTM(sfx, T)                                                                       \
    PGK_KERNEL_BOUNDS(lstm_step_##sfx,                                                         \
                      (const T* xw, const T* w_hh0, const T* w_hh1, const T* b_ih0,            \
                       const T* b_ih1, const T* b_hh0, const T* b_hh1, const float* h_in,      \
                       float* h_out, float* c, T* y, const int* lengths, int batch, int steps, \
                       int hidden, int dirs, int step, long long row_b, long long row_t),      \
                      kGates * 32) {                                                           \
        lstm_step<T>(xw, w_hh0, w_hh1, b_ih0, b_ih1, b_hh0, b_hh1, h_in, h_out, c, y, lengths, \
                     batch, steps, hidden, dirs, step, row_b, row_t);                          \
    }
PGK_FLOAT_TYPES(PGK_LSTM)

// Threads per block of lstm_step: one warp per gate.
PGK_CONSTANT(LSTM_BLOCK, kGates * 32);

// ---- The whole sequence in one launch (SM 9.0+) -------------------------------------------
// A cluster of kCluster blocks runs one direction for a slice of up to kMaxRows batch rows
// (grid: kCluster * slices by directions). Block `rank` owns the hidden units
// [rank * hidden / kCluster, (rank + 1) * hidden / kCluster) and keeps their four W_hh rows in
// registers for the whole sequence: a unit's dot products are split over a half-warp, lane `l`
// holding the weights of hidden entries (c * kLanes + l) * 4 + e (c < kPerLane / 4, e < 4), so
// h is read as float4 without bank conflicts. Each block holds the h of all its rows in shared
// memory, double-buffered: at step n every row's owner lane stores its new h into buffer
// (n + 1) % 2 of all kCluster blocks with st.async, which counts the bytes on that buffer's
// mbarrier in the receiving block; step n + 1 waits for all rows x hidden x 4 bytes. No cluster
// barrier per step: a block writes step n + 1's values into a buffer only after every block
// sent its step n values, which each warp does after it finished reading that buffer (the
// values it sends depend on those reads).
// The half-warp's partial sums of a pass of kPass rows are reduce-scattered so that lane l ends
// with gate l / kPass of row l % kPass; lane l owns batch row l of the slice (its c and h in
// registers, its xw values loaded a step ahead).
namespace lstm_seq {
constexpr int kCluster = 8;
constexpr int kLanes = 16;
constexpr int kPerLane = 16;
constexpr int kMaxHidden = kLanes * kPerLane;
constexpr int kMaxUnits = (kMaxHidden + kCluster - 1) / kCluster;
constexpr int kThreads = kMaxUnits * kLanes;
constexpr int kMaxRows = kLanes;
constexpr int kPass = 4;
constexpr unsigned kFull = 0xffffffffu;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PGK_LSTM_SM90(...) __VA_ARGS__
#else
#define PGK_LSTM_SM90(...) __trap()
#endif

__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r = 0;
    PGK_LSTM_SM90(asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)));
    return r;
}

__device__ __forceinline__ void cluster_sync() {
    PGK_LSTM_SM90(asm volatile("barrier.cluster.arrive.release.aligned;" :: : "memory");
                  asm volatile("barrier.cluster.wait.acquire.aligned;" :: : "memory"));
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// The address in cluster block `rank` of the shared address `addr` of this block.
__device__ __forceinline__ unsigned in_block(unsigned addr, unsigned rank) {
    unsigned remote = 0;
    PGK_LSTM_SM90(
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank)));
    return remote;
}

__device__ __forceinline__ void bar_init(unsigned bar) {
    PGK_LSTM_SM90(asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory"));
}

__device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes) {
    PGK_LSTM_SM90(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                               "r"(bytes) : "memory"));
}

__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    PGK_LSTM_SM90(unsigned done; do {
        asm volatile(
            "{\n.reg .pred p;\n"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done));
}

// Store v at shared::cluster address `addr`, counted on the mbarrier at `bar` (same block).
__device__ __forceinline__ void store_counted(unsigned addr, float v, unsigned bar) {
    PGK_LSTM_SM90(asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(addr),
        "r"(__float_as_uint(v)), "r"(bar) : "memory"));
}

// acc[q * R + r] = this lane's part of gate row q . h of row r (rows kMaxHidden floats apart).
template <int R>
__device__ __forceinline__ void dot_rows(const float (&w)[kGates][kPerLane],
                                         const float* __restrict__ h, int lane,
                                         float (&acc)[kGates * R]) {
#pragma unroll
    for (int i = 0; i < kGates * R; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane / 4; ++c) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float4 v =
                *reinterpret_cast<const float4*>(h + r * kMaxHidden + (c * kLanes + lane) * 4);
#pragma unroll
            for (int q = 0; q < kGates; ++q) {
                float a = acc[q * R + r];
                a = fmaf(w[q][c * 4 + 0], v.x, a);
                a = fmaf(w[q][c * 4 + 1], v.y, a);
                a = fmaf(w[q][c * 4 + 2], v.z, a);
                a = fmaf(w[q][c * 4 + 3], v.w, a);
                acc[q * R + r] = a;
            }
        }
    }
}

// One halving round of a reduce-scatter over the half-warp: lanes with `mask` set keep the
// upper half of v, the others the lower half, each adding its partner's copy.
template <int Half, int N>
__device__ __forceinline__ void halve(float (&v)[N], int lane, int mask) {
    const bool upper = (lane & mask) != 0;
#pragma unroll
    for (int i = 0; i < Half; ++i) {
        const float send = upper ? v[i] : v[i + Half];
        const float keep = upper ? v[i + Half] : v[i];
        v[i] = keep + __shfl_xor_sync(kFull, send, mask);
    }
}

// g[q] of the lane owning row `lane`: the recurrent sums h @ W_hh^T of its four gates.
__device__ __forceinline__ void recurrent_gates(const float (&w)[kGates][kPerLane],
                                                const float* __restrict__ h, int rows, int lane,
                                                float (&g)[kGates]) {
    int p = 0;
#pragma unroll 1
    for (; p + 1 < rows; p += kPass) {  // rows p .. p + 3 (rows past the slice are zeros)
        float acc[kGates * kPass];
        dot_rows<kPass>(w, h + p * kMaxHidden, lane, acc);
        halve<8>(acc, lane, 8);
        halve<4>(acc, lane, 4);
        halve<2>(acc, lane, 2);
        halve<1>(acc, lane, 1);  // lane l: gate l / 4 of row p + l % 4
        const int r = (lane - p) & (kPass - 1);
#pragma unroll
        for (int q = 0; q < kGates; ++q) {
            const float v = __shfl_sync(kFull, acc[0], q * kPass + r, kLanes);
            if (lane >= p && lane < p + kPass) g[q] = v;
        }
    }
    if (p < rows) {  // one row left
        float acc[kGates];
        dot_rows<1>(w, h + p * kMaxHidden, lane, acc);
        halve<2>(acc, lane, 8);
        halve<1>(acc, lane, 4);  // lane l: gate l / 4, summed over half the lanes
        acc[0] += __shfl_xor_sync(kFull, acc[0], 2);
        acc[0] += __shfl_xor_sync(kFull, acc[0], 1);
#pragma unroll
        for (int q = 0; q < kGates; ++q) {
            const float v = __shfl_sync(kFull, acc[0], q * kPass, kLanes);
            if (lane == p) g[q] = v;
        }
    }
}

template <typename T>
__device__ __forceinline__ float gate_bias(const T* b_ih, const T* b_hh, int row) {
    float v = 0.0f;
    if (b_ih != nullptr) v += widen(b_ih[row]);
    if (b_hh != nullptr) v += widen(b_hh[row]);
    return v;
}

template <typename T>
__device__ __forceinline__ void lstm_sequence(
    const T* __restrict__ xw, const T* __restrict__ w_hh0, const T* __restrict__ w_hh1,
    const T* __restrict__ b_ih0, const T* __restrict__ b_ih1, const T* __restrict__ b_hh0,
    const T* __restrict__ b_hh1, const T* __restrict__ h0, const T* __restrict__ c0,
    T* __restrict__ h_n, T* __restrict__ c_n, T* __restrict__ y, const int* __restrict__ lengths,
    int batch, int steps, int hidden, int dirs, int slice_rows, long long row_b, long long row_t) {
    __shared__ __align__(16) float h_all[2][kMaxRows][kMaxHidden];
    __shared__ __align__(8) unsigned long long arrived[2];
    const int d = blockIdx.y;
    const unsigned rank = cluster_rank();
    const int b0 = static_cast<int>(blockIdx.x / kCluster) * slice_rows;
    const int rows_here = min(slice_rows, batch - b0);
    const int first_unit = static_cast<int>(rank) * hidden / kCluster;
    const int units = (static_cast<int>(rank) + 1) * hidden / kCluster - first_unit;
    const int lane = threadIdx.x & (kLanes - 1);
    const int unit = threadIdx.x / kLanes;
    const int j = first_unit + unit;
    const bool owns_unit = unit < units;
    const bool warp_works = (threadIdx.x / 32) * 2 < units;  // its first unit is real
    const bool owns_row = owns_unit && lane < rows_here;     // lane l owns batch row b0 + l
    const int b = b0 + lane;
    const T* w_hh = d == 0 ? w_hh0 : w_hh1;
    const T* b_ih = d == 0 ? b_ih0 : b_ih1;
    const T* b_hh = d == 0 ? b_hh0 : b_hh1;

    // Both h buffers start as zeros (the padding past `hidden` and past the slice's rows meets
    // zero weights and must be finite), then buffer 0 takes h0.
    float* flat = &h_all[0][0][0];
    for (int i = threadIdx.x; i < 2 * kMaxRows * kMaxHidden; i += blockDim.x) flat[i] = 0.0f;
    const unsigned bars = smem_addr(&arrived[0]);
    const unsigned phase_bytes = static_cast<unsigned>(rows_here * hidden) * 4u;
    if (threadIdx.x == 0) {
        bar_init(bars);
        bar_init(bars + 8);
        PGK_LSTM_SM90(asm volatile("fence.mbarrier_init.release.cluster;" :: : "memory"));
        bar_expect(bars, phase_bytes);
        bar_expect(bars + 8, phase_bytes);
    }
    __syncthreads();
    const long long state0 = static_cast<long long>(d) * batch + b0;
    if (h0 != nullptr) {
        for (int i = threadIdx.x; i < rows_here * hidden; i += blockDim.x)
            h_all[0][i / hidden][i % hidden] = widen(h0[state0 * hidden + i]);
    }

    float w[kGates][kPerLane];
#pragma unroll
    for (int q = 0; q < kGates; ++q) {
        const T* row = w_hh + (static_cast<long long>(q) * hidden + j) * hidden;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int k = ((i / 4) * kLanes + lane) * 4 + i % 4;
            w[q][i] = owns_unit && k < hidden ? widen(row[k]) : 0.0f;
        }
    }
    float bias[kGates];
#pragma unroll
    for (int q = 0; q < kGates; ++q)
        bias[q] = owns_unit ? gate_bias(b_ih, b_hh, q * hidden + j) : 0.0f;
    const long long state = (state0 + lane) * hidden + j;
    float h = 0.0f, cell = 0.0f;
    int length = steps;
    if (owns_row) {
        if (h0 != nullptr) h = widen(h0[state]);
        if (c0 != nullptr) cell = widen(c0[state]);
        if (lengths != nullptr) length = lengths[b];
    }
    int longest = steps;  // the slice's longest row: later steps only output zeros
    if (lengths != nullptr) {
        longest = 0;
        for (int r = 0; r < rows_here; ++r) longest = max(longest, lengths[b0 + r]);
    }
    const long long rows = static_cast<long long>(batch) * steps;
    const long long gate_width = static_cast<long long>(kGates) * hidden;
    const T* xw_dir = xw + static_cast<long long>(d) * rows * gate_width + j;
    const long long y_width = static_cast<long long>(dirs) * hidden;
    T* y_row = y + static_cast<long long>(d) * hidden + j;
    float x_cur[kGates], x_next[kGates];
    auto load_x = [&](int t, float (&out)[kGates]) {
        const T* p = xw_dir + (b * row_b + t * row_t) * gate_width;
#pragma unroll
        for (int q = 0; q < kGates; ++q) out[q] = widen(p[q * hidden]) + bias[q];
    };
    if (owns_row && longest > 0) load_x(d == 0 ? 0 : longest - 1, x_cur);
    cluster_sync();  // every block's buffers and mbarriers are set before any store into them

    if (warp_works) {
        for (int n = 0; n < longest; ++n) {
            const int t = d == 0 ? n : longest - 1 - n;
            const int cur = n & 1;
            if (n > 0) {  // step n - 1's h of every block has landed in buffer n % 2
                const unsigned bar = bars + 8 * cur;
                bar_wait(bar, ((n - 1) >> 1) & 1);
                // Re-arm for step n + 1's stores into this buffer: they come only after every
                // block received this block's step n values, so after this wait.
                if (threadIdx.x == 0 && n + 2 < longest) bar_expect(bar, phase_bytes);
            }
            if (owns_row && n + 1 < longest) load_x(d == 0 ? t + 1 : t - 1, x_next);
            float g[kGates] = {0.0f, 0.0f, 0.0f, 0.0f};
            recurrent_gates(w, &h_all[cur][0][0], rows_here, lane, g);
            if (owns_row) {
                const bool live = t < length;
                if (live) {
                    cell = sigmoid(g[1] + x_cur[1]) * cell +
                           sigmoid(g[0] + x_cur[0]) * tanhf(g[2] + x_cur[2]);
                    h = sigmoid(g[3] + x_cur[3]) * tanhf(cell);
                }
                y_row[(b * row_b + t * row_t) * y_width] = narrow<T>(live ? h : 0.0f);
                if (n + 1 < longest) {  // the last step's h is read by no one
                    const unsigned slot = smem_addr(&h_all[cur ^ 1][lane][j]);
                    const unsigned bar = bars + 8 * (cur ^ 1);
#pragma unroll
                    for (unsigned r = 0; r < kCluster; ++r)
                        store_counted(in_block(slot, r), h, in_block(bar, r));
                }
#pragma unroll
                for (int q = 0; q < kGates; ++q) x_cur[q] = x_next[q];
            }
        }
    }
    if (owns_row) {
        for (int t = longest; t < steps; ++t)
            y_row[(b * row_b + t * row_t) * y_width] = narrow<T>(0.0f);
        h_n[state] = narrow<T>(h);
        c_n[state] = narrow<T>(cell);
    }
}
}  // namespace lstm_seq

// Clusters exist from SM 9.0: older targets get the entry point (one manifest for every arch)
// with a body that traps; the host never launches it there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PGK_LSTM_CLUSTER __cluster_dims__(lstm_seq::kCluster, 1, 1)
#else
#define PGK_LSTM_CLUSTER
#endif

#define PGK_LSTM_SEQUENCE(sfx, T)                                                                  \
    PGK_KERNEL_WITH_(lstm_sequence_##sfx,                                                          \
                     (const T* xw, const T* w_hh0, const T* w_hh1, const T* b_ih0, const T* b_ih1, \
                      const T* b_hh0, const T* b_hh1, const T* h0, const T* c0, T* h_n, T* c_n,    \
                      T* y, const int* lengths, int batch, int steps, int hidden, int dirs,        \
                      int slice_rows, long long row_b, long long row_t),                           \
                     PGK_LSTM_CLUSTER __launch_bounds__(lstm_seq::kThreads, 1)) {                  \
        PGK_LSTM_SM90(lstm_seq::lstm_sequence<T>(xw, w_hh0, w_hh1, b_ih0, b_ih1, b_hh0, b_hh1, h0, \
                                                 c0, h_n, c_n, y, lengths, batch, steps, hidden,   \
                                                 dirs, slice_rows, row_b, row_t));                 \
    }
PGK_FLOAT_TYPES(PGK_LSTM_SEQUENCE)

// The sequence kernel's limits: blocks per cluster (the hidden units of a direction are split
// over them), hidden sizes, batch rows per cluster, batch rows per pass over the weights,
// threads per block per hidden unit.
PGK_CONSTANT(LSTM_SEQ_CLUSTER, lstm_seq::kCluster);
PGK_CONSTANT(LSTM_SEQ_MIN_HIDDEN, lstm_seq::kCluster);
PGK_CONSTANT(LSTM_SEQ_MAX_HIDDEN, lstm_seq::kMaxHidden);
PGK_CONSTANT(LSTM_SEQ_MAX_ROWS, lstm_seq::kMaxRows);
PGK_CONSTANT(LSTM_SEQ_PASS, lstm_seq::kPass);
PGK_CONSTANT(LSTM_SEQ_LANES, lstm_seq::kLanes);
