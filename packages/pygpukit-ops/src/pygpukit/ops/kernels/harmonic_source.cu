// The merged harmonic source of an iSTFTNet vocoder (Kokoro's SourceModuleHnNSF without noise),
// one pass from per-frame phase tables to the excitation (host side: ops/harmonic_source.py):
//
//   harmonic_source_f32  out[b, t] = tanh(bias + sum_h weight[h] * amp * sin(2 pi phase[b, h, t]))
//                        on voiced samples (f0[b, t / up] > voiced_f0), tanh(bias) elsewhere,
//                        with phase[b, h, t] = start[b, h, i] + slope[b, h, i] * (j + offset) for
//                        sample t at place p = t + half of the left-extended frames: i = p / up,
//                        j = p % up.
//
// The composed form writes and reads [B, H, T] float32 phases and sines eight times over (a batch
// of 16 ten-second utterances is 40 M values a pass); here each sample's nine harmonics stay in
// registers. One thread per output sample, grid-stride with 64-bit indices.
#include "pygpukit/kernel.cuh"

PGK_KERNEL(harmonic_source_f32,
           (const float* __restrict__ start, const float* __restrict__ slope,
            const float* __restrict__ f0, const float* __restrict__ weight,
            const float* __restrict__ bias, float* __restrict__ out, long long total, int frames,
            int up, int half, float offset, float amp, float voiced_f0, int harmonics)) {
    const long long length = static_cast<long long>(frames) * up;
    const long long table = static_cast<long long>(frames) + 1;  // left-extended by one frame
    const float two_pi = 6.2831855f;
    const float b0 = bias[0];
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long b = i / length;
        const long long t = i - b * length;
        float acc = b0;
        if (f0[b * frames + t / up] > voiced_f0) {
            const long long p = t + half;
            const long long frame = p / up;
            const float ramp = static_cast<float>(p - frame * up) + offset;
            const long long base = b * harmonics * table + frame;
            for (int h = 0; h < harmonics; ++h) {
                const long long at = base + h * table;
                const float phase = start[at] + slope[at] * ramp;
                acc += weight[h] * (sinf(phase * two_pi) * amp);
            }
        }
        out[i] = tanhf(acc);
    }
}

// Threads per block.
PGK_CONSTANT(HARMONIC_BLOCK, 256);
