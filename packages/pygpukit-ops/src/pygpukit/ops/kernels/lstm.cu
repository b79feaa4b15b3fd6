// One time step of a (bidirectional) LSTM, PyTorch's gate order i, f, g, o (host side:
// ops/recurrent.py). The input projections of every step, xw = x @ W_ih^T, come from one matmul
// per direction before the loop; this kernel adds the recurrent part and updates the state:
//
//   gates = xw[t] + b_ih + b_hh + h @ W_hh^T        (four rows of W_hh per hidden unit)
//   c = sigmoid(f) * c + sigmoid(i) * tanh(g);  h = sigmoid(o) * tanh(c)
//
// Grid (hidden, directions): block (j, d) owns hidden unit j of direction d for the whole batch;
// its four warps take the four gates, each warp one dot product of a W_hh row with h per batch
// row (lanes over the hidden axis, shuffle-reduced). Direction 1 walks time backwards. The state
// is fp32: h is double-buffered (h_in of the previous step, h_out of this one, swapped by the
// host) because other blocks still read h_in; c is owned by one thread and updated in place.
// With `lengths`, a batch row whose sequence has ended (t >= lengths[b]) keeps its state and
// writes zeros, as PyTorch's packed sequences do (the reverse direction then starts at the
// row's last real step).
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

constexpr int kGates = 4;
// Batch rows whose gate sums a block holds in shared memory at once.
constexpr int kBatchChunk = 32;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

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
