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
//   audio_yin_diff_f32      YIN's cumulative mean normalised difference d'(tau) of each frame,
//                           one block per frame, the frame in shared memory.
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
// The largest frame audio_yin_diff_f32 holds in shared memory (floats).
PGK_CONSTANT(AUDIO_YIN_MAX_FRAME, 8192);

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

// d'(tau) for tau in [0, max_lag] of frame f: d(tau) = sum_{j < w} (x_j - x_{j+tau})^2 over the
// frame's first w = frame_length - max_lag samples, then d'(0) = 1 and
// d'(tau) = d(tau) * tau / sum_{s=1..tau} d(s). One block per frame: the threads share the
// lags, then thread 0 runs the prefix sum (max_lag is at most a few thousand).
PGK_KERNEL(audio_yin_diff_f32,
           (const float* frames, float* out, long long n_frames, int frame_length, int max_lag)) {
    extern __shared__ float smem[];
    float* frame = smem;
    float* diff = smem + frame_length;
    const long long f = blockIdx.x;
    if (f >= n_frames) return;
    const float* src = frames + f * frame_length;
    for (int i = threadIdx.x; i < frame_length; i += blockDim.x) frame[i] = src[i];
    __syncthreads();
    const int w = frame_length - max_lag;
    for (int tau = threadIdx.x; tau <= max_lag; tau += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < w; ++j) {
            const float d = frame[j] - frame[j + tau];
            acc = fmaf(d, d, acc);
        }
        diff[tau] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float running = 0.0f;
        float* dst = out + f * (max_lag + 1);
        dst[0] = 1.0f;
        for (int tau = 1; tau <= max_lag; ++tau) {
            running += diff[tau];
            dst[tau] = running > 0.0f ? diff[tau] * tau / running : 1.0f;
        }
    }
}
