// Audio kernels (host side: ops/audio/). The DFTs themselves are matrix products with a
// precomputed basis (gp.matmul); these kernels move samples into and out of those products.
//
//   audio_frames_f32        frames[b, f, n] = xpad[b, f*hop + n], xpad = x padded by `pad` on
//                           both sides (reflect = 1: mirrored without repeating the edge sample,
//                           as numpy's "reflect"; 0: zeros). One thread per frame sample.
//   audio_spec_out_f32      a planar spectrum P[b, c, k, f] (c = 0 real, 1 imaginary) into the
//                           caller's form: mode 0 interleaved complex [b, k, f, 2], 1 magnitude,
//                           2 power, 3 magnitude and phase (atan2) in two arrays.
//   audio_spec_in_f32       the reverse: mode 0 interleaved complex [b, k, f, 2] (in `a`), 1 a
//                           magnitude `a` and phase `b` (polar), into the planar P.
//   audio_overlap_add_f32   the inverse STFT's overlap-add of frames stored transposed,
//                           framesT[b, n, f] (already windowed), divided by the summed squared
//                           window where it is above float32's tiny, trimmed to [start, start+len).
//                           One thread per output sample gathers the ceil(n_fft / hop) frames over
//                           it: no atomics, deterministic.
//   audio_log_finish_f32    in place: y = max(s*log10(max(x, amin)), s*log10(max(m_b, amin)) - top)
//                           * mul + add with m_b the maximum of the batch item (Whisper: s = 1,
//                           top 8, mul 1/4, add 1; power_to_db: s = 10, top = top_db).
//   audio_resample_f32      polyphase FIR: y[b, j] = sum_t h[p(j), t] * x[b, base(j) + t] with
//                           p(j) = (j * down) % up and base(j) = (j * down) / up - half; samples
//                           outside the signal are zeros.
//   audio_yin_f32           YIN's pitch and voicing of each frame (see the kernel).
#include "pygpukit/kernel.cuh"

namespace {

__device__ __forceinline__ long long grid_stride() {
    return static_cast<long long>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ long long first_index() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

}  // namespace

PGK_CONSTANT(AUDIO_THREADS, 256);
// The most floats audio_yin_f32 holds in shared memory (frame_length + max_period + 1).
PGK_CONSTANT(AUDIO_YIN_MAX_SHARED, 12288);

PGK_KERNEL(audio_frames_f32, (const float* x, float* frames, long long batch, long long length,
                              int n_fft, int hop, long long n_frames, long long pad, int reflect)) {
    const long long per_item = n_frames * n_fft;
    const long long total = batch * per_item;
    for (long long i = first_index(); i < total; i += grid_stride()) {
        const long long b = i / per_item;
        const long long r = i - b * per_item;
        const long long f = r / n_fft;
        const long long n = r - f * n_fft;
        long long s = f * hop + n - pad;
        float v = 0.0f;
        if (reflect) {
            if (s < 0) s = -s;
            if (s >= length) s = 2 * (length - 1) - s;
            v = x[b * length + s];
        } else if (s >= 0 && s < length) {
            v = x[b * length + s];
        }
        frames[i] = v;
    }
}

PGK_KERNEL(audio_spec_out_f32, (const float* planar, float* a, float* b_out, long long batch,
                                int n_bins, long long n_frames, int mode)) {
    const long long plane = static_cast<long long>(n_bins) * n_frames;
    const long long total = batch * plane;
    for (long long i = first_index(); i < total; i += grid_stride()) {
        const long long b = i / plane;
        const long long r = i - b * plane;
        const float re = planar[b * 2 * plane + r];
        const float im = planar[b * 2 * plane + plane + r];
        if (mode == 0) {
            reinterpret_cast<float2*>(a)[i] = make_float2(re, im);
        } else if (mode == 1) {
            a[i] = sqrtf(re * re + im * im);
        } else if (mode == 2) {
            a[i] = re * re + im * im;
        } else {
            a[i] = sqrtf(re * re + im * im);
            b_out[i] = atan2f(im, re);
        }
    }
}

PGK_KERNEL(audio_spec_in_f32, (const float* a, const float* b_in, float* planar, long long batch,
                               int n_bins, long long n_frames, int mode)) {
    const long long plane = static_cast<long long>(n_bins) * n_frames;
    const long long total = batch * plane;
    for (long long i = first_index(); i < total; i += grid_stride()) {
        const long long b = i / plane;
        const long long r = i - b * plane;
        float re, im;
        if (mode == 0) {
            const float2 v = reinterpret_cast<const float2*>(a)[i];
            re = v.x;
            im = v.y;
        } else {
            float s, c;
            sincosf(b_in[i], &s, &c);
            re = a[i] * c;
            im = a[i] * s;
        }
        planar[b * 2 * plane + r] = re;
        planar[b * 2 * plane + plane + r] = im;
    }
}

PGK_KERNEL(audio_overlap_add_f32,
           (const float* frames_t, const float* window, float* y, long long batch, int n_fft,
            int hop, long long n_frames, long long start, long long out_len)) {
    const long long total = batch * out_len;
    const long long padded_len = n_fft + static_cast<long long>(hop) * (n_frames - 1);
    const float tiny = 1.1754943508222875e-38f;
    for (long long i = first_index(); i < total; i += grid_stride()) {
        const long long b = i / out_len;
        const long long t = i - b * out_len + start;
        float value = 0.0f, envelope = 0.0f;
        if (t < padded_len) {
            long long f_hi = t / hop;
            if (f_hi > n_frames - 1) f_hi = n_frames - 1;
            long long f_lo = t - n_fft + 1 <= 0 ? 0 : (t - n_fft + hop) / hop;
            const float* item = frames_t + b * n_fft * n_frames;
            for (long long f = f_lo; f <= f_hi; ++f) {
                const long long n = t - f * hop;
                const float w = window[n];
                value += item[n * n_frames + f];
                envelope += w * w;
            }
        }
        y[i] = envelope > tiny ? value / envelope : value;
    }
}

PGK_KERNEL(audio_log_finish_f32, (float* x, const float* maxes, long long batch, long long per_item,
                                  float scale, float amin, float top, float mul, float add)) {
    const long long total = batch * per_item;
    for (long long i = first_index(); i < total; i += grid_stride()) {
        const long long b = i / per_item;
        const float floor_value = scale * log10f(fmaxf(maxes[b], amin)) - top;
        const float v = fmaxf(scale * log10f(fmaxf(x[i], amin)), floor_value);
        x[i] = v * mul + add;
    }
}

PGK_KERNEL(audio_resample_f32,
           (const float* x, const float* taps, float* y, long long batch, long long in_len,
            long long out_len, int up, int down, int n_taps, int half)) {
    const long long total = batch * out_len;
    for (long long i = first_index(); i < total; i += grid_stride()) {
        const long long b = i / out_len;
        const long long j = i - b * out_len;
        const long long pos = j * down;
        const int phase = static_cast<int>(pos % up);
        const long long base = pos / up - half;
        const float* h = taps + static_cast<long long>(phase) * n_taps;
        const float* row = x + b * in_len;
        float acc = 0.0f;
        const int t0 = base < 0 ? static_cast<int>(-base) : 0;
        long long t1 = in_len - base;
        if (t1 > n_taps) t1 = n_taps;
        for (int t = t0; t < t1; ++t) acc = fmaf(h[t], row[base + t], acc);
        y[i] = acc;
    }
}

// YIN on frame f (one block a frame, the frame and its difference function in shared memory):
//   r(tau) = sum_{m < N - tau} x_m x_{m+tau} (the frame's autocorrelation), tau <= max_period;
//   d(tau) = 2 (r(0) - r(tau)) - sum_{m < tau} x_m^2 (librosa's difference function);
//   d'(tau) = d(tau) / (mean of d(1..tau) + tiny) (the cumulative mean normalised difference);
// then over tau in [min_period, max_period]: the first local minimum below `threshold` (voiced),
// else the global minimum (unvoiced), refined by a parabola through it and its neighbours;
// f0 = sr / period. The threads share the lags; thread 0 runs the scans (max_period is at
// most a few thousand).
PGK_KERNEL(audio_yin_f32,
           (const float* frames, float* f0, unsigned char* voiced, long long n_frames,
            int frame_length, int min_period, int max_period, float threshold, float sr)) {
    extern __shared__ float smem[];
    float* frame = smem;
    float* d = smem + frame_length;
    const long long f = blockIdx.x;
    if (f >= n_frames) return;
    const float* src = frames + f * frame_length;
    for (int i = threadIdx.x; i < frame_length; i += blockDim.x) frame[i] = src[i];
    __syncthreads();
    for (int tau = threadIdx.x; tau <= max_period; tau += blockDim.x) {
        float acc = 0.0f;
        for (int m = 0; m + tau < frame_length; ++m) acc = fmaf(frame[m], frame[m + tau], acc);
        d[tau] = acc;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    const float tiny = 1.1754943508222875e-38f;
    const float r0 = d[0];
    float energy = 0.0f, running = 0.0f;
    for (int tau = 1; tau <= max_period; ++tau) {
        energy = fmaf(frame[tau - 1], frame[tau - 1], energy);
        const float diff = 2.0f * (r0 - d[tau]) - energy;
        running += diff;
        d[tau] = diff / (running / tau + tiny);
    }
    const float* y = d + min_period;
    const int n = max_period - min_period + 1;
    int chosen = -1, best = 0;
    for (int i = 0; i < n; ++i) {
        if (y[i] < y[best]) best = i;
        if (chosen < 0 && y[i] < threshold && n > 1) {
            const bool below_left = i == 0 ? y[0] < y[1] : y[i] < y[i - 1];
            const bool not_above_right = i == n - 1 || y[i] <= y[i + 1];
            if (below_left && not_above_right) chosen = i;
        }
    }
    const int i = chosen >= 0 ? chosen : best;
    float shift = 0.0f;
    if (i > 0 && i < n - 1) {
        const float a = y[i + 1] + y[i - 1] - 2.0f * y[i];
        const float b = 0.5f * (y[i + 1] - y[i - 1]);
        if (fabsf(b) < fabsf(a)) shift = -b / a;
    }
    f0[f] = sr / (static_cast<float>(min_period + i) + shift);
    voiced[f] = chosen >= 0 ? 1 : 0;
}
