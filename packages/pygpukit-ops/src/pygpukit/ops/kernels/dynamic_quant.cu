// ONNX DynamicQuantizeLinear followed by its dequantization, per batch row (host side:
// ops/dynamic_quant.py):
//
//   dynamic_quant_dequant_f32  for row b (one block each) over its first lengths[b] * inner
//                              values (all of them without lengths):
//                              lo = min(min(x), 0), hi = max(max(x), 0),
//                              scale = (hi - lo) / 255 (1 where hi == lo),
//                              zp = rint(clamp(0 - lo / scale, 0, 255)),
//                              y = rint(clamp(x / scale, -zp, 255 - zp)) * scale;
//                              the row's values past them are copied unchanged.
//
// The arithmetic is onnxruntime's (GetQuantizationParameter and MlasQuantizeLinear): float32
// throughout, an IEEE division by the scale (not a multiply by its reciprocal) and rounding half
// to even, so the dequantized values equal onnxruntime's (q - zp) * scale bit for bit. One block
// per row: a row is at most a few hundred thousand values (one utterance's activations), read
// twice from L2.
#include "pygpukit/kernel.cuh"

// Threads per block (a multiple of 32).
PGK_CONSTANT(DYNAMIC_QUANT_BLOCK, 1024);

PGK_KERNEL(dynamic_quant_dequant_f32, (const float* __restrict__ x, float* __restrict__ y,
                                       const long long* __restrict__ lengths, long long row,
                                       long long inner, int has_lengths)) {
    __shared__ float lo_warp[32];
    __shared__ float hi_warp[32];
    __shared__ float params[2];
    const long long base = static_cast<long long>(blockIdx.x) * row;
    // Lengths live on the device (a CUDA graph's input, rewritten between replays): clamped here.
    const long long n = has_lengths ? min(max(lengths[blockIdx.x], 0LL) * inner, row) : row;
    float lo = 0.0f;  // the range always includes zero
    float hi = 0.0f;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = x[base + i];
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
        hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
    }
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (lane == 0) {
        lo_warp[warp] = lo;
        hi_warp[warp] = hi;
    }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x / 32;
        lo = lane < warps ? lo_warp[lane] : 0.0f;
        hi = lane < warps ? hi_warp[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, offset));
            hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, offset));
        }
        if (lane == 0) {
            const float scale = hi == lo ? 1.0f : __fdiv_rn(hi - lo, 255.0f);
            const float zero_point = rintf(fmaxf(0.0f, fminf(255.0f, 0.0f - __fdiv_rn(lo, scale))));
            params[0] = scale;
            params[1] = zero_point;
        }
    }
    __syncthreads();
    const float scale = params[0];
    const float zero_point = params[1];
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
        const float q =
            fminf(fmaxf(__fdiv_rn(x[base + i], scale), -zero_point), 255.0f - zero_point);
        y[base + i] = rintf(q) * scale;
    }
    if (x != y) {
        for (long long i = n + threadIdx.x; i < row; i += blockDim.x) y[base + i] = x[base + i];
    }
}
