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
//   audio_overlap_add_f32   the inverse STFT's overlap-add of windowed frames (sample n of frame f
//                           of item b at b*n_fft*n_frames + f*frame_stride + n*sample_stride:
//                           frame-major or transposed), divided by the summed squared
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
//   audio_stft_fft_f32      the fused STFT for n_fft <= 2048 whose prime factors are <= 64: frames
//                           cut from the signal, windowed, transformed by a mixed-radix Stockham
//                           FFT in shared memory (two real frames as one complex one) and written
//                           in the caller's form; no frame buffer, no matmul.
//   audio_istft_fft_f32     its inverse: spectra to windowed frames [b, f, n] for the overlap-add.
//   audio_stft_pow2_<N>_f32 the fused STFT for a power-of-two n_fft = N in [64, 4096]: the same
//                           contract as audio_stft_fft_f32, with the radix-16 passes of the FFT
//                           held in registers (see its section).
#include "pygpukit/kernel.cuh"

namespace {

__device__ __forceinline__ long long grid_stride() {
    return static_cast<long long>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ long long first_index() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// Bin k of one of two real frames packed into one complex FFT (even j: the real part's frame,
// odd j: the imaginary part's), from Z[k] and Z[N - k] of their joint transform.
__device__ __forceinline__ float2 unpack_real_pair(float2 zk, float2 zn_k, int j) {
    if ((j & 1) == 0) return make_float2(0.5f * (zk.x + zn_k.x), 0.5f * (zk.y - zn_k.y));
    return make_float2(0.5f * (zk.y + zn_k.y), -0.5f * (zk.x - zn_k.x));
}

// One spectrum value written in the output form `mode` selects: 0 complex (float2), 1 magnitude,
// 2 power, 3 magnitude into a and phase into b_out.
__device__ __forceinline__ void store_spectrum(float* a, float* b_out, long long o, float re,
                                               float im, int mode) {
    if (mode == 0) {
        reinterpret_cast<float2*>(a)[o] = make_float2(re, im);
    } else if (mode == 1) {
        a[o] = sqrtf(re * re + im * im);
    } else if (mode == 2) {
        a[o] = re * re + im * im;
    } else {
        a[o] = sqrtf(re * re + im * im);
        b_out[o] = atan2f(im, re);
    }
}

// The complex value at o of a spectrum given as complex (mode 0) or magnitude a and phase b_in.
__device__ __forceinline__ float2 load_spectrum(const float* a, const float* b_in, long long o,
                                                int mode) {
    if (mode == 0) return reinterpret_cast<const float2*>(a)[o];
    float s, c;
    sincosf(b_in[o], &s, &c);
    return make_float2(a[o] * c, a[o] * s);
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
        store_spectrum(a, b_out, i, re, im, mode);
    }
}

PGK_KERNEL(audio_spec_in_f32, (const float* a, const float* b_in, float* planar, long long batch,
                               int n_bins, long long n_frames, int mode)) {
    const long long plane = static_cast<long long>(n_bins) * n_frames;
    const long long total = batch * plane;
    for (long long i = first_index(); i < total; i += grid_stride()) {
        const long long b = i / plane;
        const long long r = i - b * plane;
        const float2 v = load_spectrum(a, b_in, i, mode);
        planar[b * 2 * plane + r] = v.x;
        planar[b * 2 * plane + plane + r] = v.y;
    }
}

PGK_KERNEL(audio_overlap_add_f32,
           (const float* frames, const float* window, float* y, long long batch, int n_fft, int hop,
            long long n_frames, long long start, long long out_len, long long frame_stride,
            long long sample_stride)) {
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
            const float* item = frames + b * n_fft * n_frames;
            for (long long f = f_lo; f <= f_hi; ++f) {
                const long long n = t - f * hop;
                const float w = window[n];
                value += item[f * frame_stride + n * sample_stride];
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

// ----------------------------------------------------------------------------- fused FFT STFT
//
// A block takes 2 * `pairs` consecutive frames (of the flattened [batch * n_frames]); frame 2p is
// the real part and frame 2p + 1 the imaginary part of complex sequence p, so one complex FFT
// of length N serves two real frames: X_a[k] = (Z[k] + conj Z[N-k]) / 2 and
// X_b[k] = (Z[k] - conj Z[N-k]) / 2i. The FFT is Stockham's autosort form, decimation in
// frequency: a stage of radix r over a remaining length n (stride s, m = n / r) reads
// a_j = src[q + s (p + j m)] and writes dst[q + s (r p + k)] = w_n^{pk} sum_j a_j w_r^{jk},
// ping-ponging between two shared buffers; the result is in natural order. Twiddles
// w_N^i = exp(-2 pi i / N) come from a table made in float64 on the host. Radices 2, 3, 4 and 5
// are unrolled; any other prime (up to 64) takes a generic loop.

PGK_CONSTANT(AUDIO_FFT_THREADS, 256);
// Dynamic shared memory of the fused FFT kernels, in complex values: the twiddles (N) and two
// buffers of pairs * N; with the forward kernel's 384 bytes of frame origins, within the 48 KiB
// a kernel gets without opting in.
PGK_CONSTANT(AUDIO_FFT_SHARED_COMPLEX, 6096);
// The most frame pairs a block of the fused kernels takes.
PGK_CONSTANT(AUDIO_FFT_MAX_PAIRS, 8);

namespace {

__device__ __forceinline__ float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

template <int R>
__device__ __forceinline__ void butterfly(const float2* src, float2* dst, const float2* tw, int N,
                                          int m, int s, int pp, int q, int step) {
    float2 a[R];
#pragma unroll
    for (int j = 0; j < R; ++j) a[j] = src[q + s * (pp + j * m)];
    const int root = N / R;
#pragma unroll
    for (int k = 0; k < R; ++k) {
        float2 y = a[0];
#pragma unroll
        for (int j = 1; j < R; ++j) {
            const float2 v = cmul(a[j], tw[((j * k) % R) * root]);
            y.x += v.x;
            y.y += v.y;
        }
        if (k) y = cmul(y, tw[(pp * k * step) % N]);
        dst[q + s * (R * pp + k)] = y;
    }
}

__device__ __forceinline__ void butterfly_any(const float2* src, float2* dst, const float2* tw,
                                              int N, int r, int m, int s, int pp, int q, int step) {
    const int root = N / r;
    for (int k = 0; k < r; ++k) {
        float2 y = make_float2(0.0f, 0.0f);
        for (int j = 0; j < r; ++j) {
            const float2 v = cmul(src[q + s * (pp + j * m)], tw[((j * k) % r) * root]);
            y.x += v.x;
            y.y += v.y;
        }
        if (k) y = cmul(y, tw[(pp * k * step) % N]);
        dst[q + s * (r * pp + k)] = y;
    }
}

// The forward FFT of `pairs` sequences of length N in `src` (buffers of pairs * N); returns
// the buffer holding the result.
__device__ float2* fft_stages(float2* src, float2* dst, const float2* tw, const int* radices,
                              int n_radices, int N, int pairs) {
    int n = N, s = 1;
    for (int st = 0; st < n_radices; ++st) {
        const int r = radices[st];
        const int m = n / r;
        const int per_pair = N / r;
        const int step = N / n;
        for (int i = threadIdx.x; i < pairs * per_pair; i += blockDim.x) {
            const int p = i / per_pair;
            const int t = i - p * per_pair;
            const int pp = t / s;
            const int q = t - pp * s;
            const float2* sp = src + p * N;
            float2* dp = dst + p * N;
            switch (r) {
                case 2:
                    butterfly<2>(sp, dp, tw, N, m, s, pp, q, step);
                    break;
                case 3:
                    butterfly<3>(sp, dp, tw, N, m, s, pp, q, step);
                    break;
                case 4:
                    butterfly<4>(sp, dp, tw, N, m, s, pp, q, step);
                    break;
                case 5:
                    butterfly<5>(sp, dp, tw, N, m, s, pp, q, step);
                    break;
                default:
                    butterfly_any(sp, dp, tw, N, r, m, s, pp, q, step);
            }
        }
        __syncthreads();
        float2* tmp = src;
        src = dst;
        dst = tmp;
        n = m;
        s *= r;
    }
    return src;
}

// Sample n of the frame whose item starts at x[row] and whose first sample is `first` (relative
// to the item, negative in the left padding), padded as asked; 0 for a frame past the end
// (row < 0).
__device__ __forceinline__ float frame_sample(const float* x, long long row, long long first,
                                              long long length, int n, int reflect) {
    if (row < 0) return 0.0f;
    long long s = first + n;
    if (reflect) {
        if (s < 0) s = -s;
        if (s >= length) s = 2 * (length - 1) - s;
    } else if (s < 0 || s >= length) {
        return 0.0f;
    }
    return x[row + s];
}

}  // namespace

PGK_KERNEL_BOUNDS(audio_stft_fft_f32,
                  (const float* x, const float* window, const float2* twiddles, const int* radices,
                   float* a, float* b_out, long long batch, long long length, int n_fft, int hop,
                   long long n_frames, long long pad, int reflect, int n_radices, int pairs,
                   int mode),
                  256) {
    extern __shared__ float2 shared_fft[];
    // Where each frame of the block comes from and goes to, worked out once (the 64-bit
    // divisions kept out of the per-sample loops): its item's row in x (-1 past the end), its
    // first sample in the item, and the output index of its bin 0.
    __shared__ long long frame_row[2 * pgk_constant_AUDIO_FFT_MAX_PAIRS];
    __shared__ long long frame_first[2 * pgk_constant_AUDIO_FFT_MAX_PAIRS];
    __shared__ long long frame_out[2 * pgk_constant_AUDIO_FFT_MAX_PAIRS];
    const int N = n_fft;
    const int nb = N / 2 + 1;
    float2* tw = shared_fft;
    float2* buf0 = tw + N;
    float2* buf1 = buf0 + pairs * N;
    const long long total = batch * n_frames;
    const long long g0 = static_cast<long long>(blockIdx.x) * 2 * pairs;
    const int frames_here = 2 * pairs;
    if (threadIdx.x < frames_here) {
        const long long g = g0 + threadIdx.x;
        frame_row[threadIdx.x] = -1;
        if (g < total) {
            const long long b = g / n_frames;
            const long long f = g - b * n_frames;
            frame_row[threadIdx.x] = b * length;
            frame_first[threadIdx.x] = f * hop - pad;
            frame_out[threadIdx.x] = b * nb * n_frames + f;
        }
    }
    for (int i = threadIdx.x; i < N; i += blockDim.x) tw[i] = twiddles[i];
    __syncthreads();
    for (int i = threadIdx.x; i < pairs * N; i += blockDim.x) {
        const int p = i / N;
        const int n = i - p * N;
        const float w = window[n];
        buf0[i] = make_float2(
            frame_sample(x, frame_row[2 * p], frame_first[2 * p], length, n, reflect) * w,
            frame_sample(x, frame_row[2 * p + 1], frame_first[2 * p + 1], length, n, reflect) * w);
    }
    __syncthreads();
    const float2* z = fft_stages(buf0, buf1, tw, radices, n_radices, N, pairs);
    // Thread i writes bin i / (2 pairs) of frame i % (2 pairs): neighbouring threads write
    // neighbouring frames of one bin, the contiguous direction of the outputs.
    for (int i = threadIdx.x; i < nb * frames_here; i += blockDim.x) {
        const int k = i / frames_here;
        const int j = i - k * frames_here;
        if (frame_row[j] < 0) continue;
        const float2* zp = z + (j >> 1) * N;
        const float2 v = zp[k];
        const float2 w = zp[k == 0 ? 0 : N - k];  // conj taken below
        const float2 bin = unpack_real_pair(v, w, j);
        const float re = bin.x, im = bin.y;
        const long long o = frame_out[j] + k * n_frames;
        store_spectrum(a, b_out, o, re, im, mode);
    }
}

PGK_KERNEL_BOUNDS(audio_istft_fft_f32,
                  (const float* a, const float* b_in, const float* window, const float2* twiddles,
                   const int* radices, float* frames, long long batch, int n_fft,
                   long long n_frames, int n_radices, int pairs, int mode),
                  256) {
    extern __shared__ float2 shared_fft[];
    const int N = n_fft;
    float2* tw = shared_fft;
    float2* buf0 = tw + N;
    float2* buf1 = buf0 + pairs * N;
    const long long total = batch * n_frames;
    const long long g0 = static_cast<long long>(blockIdx.x) * 2 * pairs;
    const int nb = N / 2 + 1;
    const int frames_here = 2 * pairs;
    for (int i = threadIdx.x; i < N; i += blockDim.x) tw[i] = twiddles[i];
    // The spectra: frame 2p's bins into buf0[p], frame 2p + 1's into buf1[p]; the imaginary
    // parts of DC and (even N) Nyquist are dropped, as irfft does.
    for (int i = threadIdx.x; i < nb * frames_here; i += blockDim.x) {
        const int k = i / frames_here;
        const int j = i - k * frames_here;
        const long long g = g0 + j;
        float2 X = make_float2(0.0f, 0.0f);
        if (g < total) {
            const long long b = g / n_frames;
            const long long f = g - b * n_frames;
            const long long o = (b * nb + k) * n_frames + f;
            X = load_spectrum(a, b_in, o, mode);
        }
        if (k == 0 || 2 * k == N) X.y = 0.0f;
        ((j & 1) ? buf1 : buf0)[(j >> 1) * N + k] = X;
    }
    __syncthreads();
    // conj(Z), Z[n] = A[n] + i B[n] with A, B the Hermitian extensions of the two spectra, held
    // in registers until every read of the buffers is done (pairs * N <= 12 * 256).
    constexpr int kMaxPerThread = 12;
    float2 held[kMaxPerThread];
#pragma unroll
    for (int u = 0; u < kMaxPerThread; ++u) {
        const int i = threadIdx.x + u * blockDim.x;
        if (i < pairs * N) {
            const int p = i / N;
            const int n = i - p * N;
            float2 A, B;
            if (n < nb) {
                A = buf0[p * N + n];
                B = buf1[p * N + n];
            } else {
                A = buf0[p * N + N - n];
                B = buf1[p * N + N - n];
                A.y = -A.y;
                B.y = -B.y;
            }
            held[u] = make_float2(A.x - B.y, -(A.y + B.x));
        }
    }
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kMaxPerThread; ++u) {
        const int i = threadIdx.x + u * blockDim.x;
        if (i < pairs * N) buf0[i] = held[u];
    }
    __syncthreads();
    const float2* z = fft_stages(buf0, buf1, tw, radices, n_radices, N, pairs);
    // z = conj(result) / N: frame 2p is its real part, frame 2p + 1 its imaginary part.
    const float scale = 1.0f / N;
    for (int i = threadIdx.x; i < pairs * N; i += blockDim.x) {
        const int p = i / N;
        const int n = i - p * N;
        const float2 v = z[i];
        const float w = window[n] * scale;
        const long long g = g0 + 2 * p;
        if (g < total) frames[g * N + n] = v.x * w;
        if (g + 1 < total) frames[(g + 1) * N + n] = -v.y * w;
    }
}

// ---------------------------------------------------------------- power-of-two STFT (N = 2^L)
//
// For N a power of two in [64, 4096] the transform is unrolled at compile time. A block has 256
// threads in G = 4096 / N groups of T = N / 16; group g transforms frames 2g and 2g + 1 of the
// block's 2G consecutive frames as one complex sequence (as above). The FFT is Stockham's
// radix-R form (Govindaraju et al., 2008): pass p with stride Ns (the product of the earlier
// radices) takes, for each butterfly j < N / R, the R values a_r = src[j + r N / R], multiplies
// them by w_N^{r (j mod Ns) N / (Ns R)}, transforms them in registers and writes the r-th output
// to dst[(j / Ns) Ns R + (j mod Ns) + r Ns]; the result is in natural order. Radix 16 first (its
// inputs come straight from the signal, coalesced: thread t holds samples t + r T), then 16s,
// then one radix 2, 4 or 8 pass for what is left. Each thread holds 16 values; a group's buffer
// in shared memory is padded by one value every 16 (pow2_slot), so the radix-16 pass's strided
// writes fall in distinct banks. Twiddles: the float64-made table of w_N^k in global memory.

namespace {

// Compile-time loops: every register index below is a constant, so the arrays stay in registers
// (a loop the compiler declined to unroll would index them at run time, through local memory).
template <int V>
struct IntConstant {
    static constexpr int value = V;
};

template <int I, int END, typename F>
__device__ __forceinline__ void unrolled(F&& f) {
    if constexpr (I < END) {
        f(IntConstant<I>{});
        unrolled<I + 1, END>(f);
    }
}

// cos(2 pi k / 16).
__host__ __device__ constexpr float cos16(int k) {
    const float c[16] = {1.0f,  0.92387953251128674f,  0.70710678118654752f,  0.38268343236508977f,
                         0.0f,  -0.38268343236508977f, -0.70710678118654752f, -0.92387953251128674f,
                         -1.0f, -0.92387953251128674f, -0.70710678118654752f, -0.38268343236508977f,
                         0.0f,  0.38268343236508977f,  0.70710678118654752f,  0.92387953251128674f};
    return c[k & 15];
}

__host__ __device__ constexpr int bit_reverse(int i, int bits) {
    int r = 0;
    for (int b = 0; b < bits; ++b) r = (r << 1) | ((i >> b) & 1);
    return r;
}

// The radix-2 decimation-in-frequency stages of an R-point DFT, butterflies HALF apart first:
// (p, q) -> (p + q, (p - q) w_{2 HALF}^k); the result is in bit-reversed order.
template <int R, int HALF>
__device__ __forceinline__ void dif_stages(float2 (&v)[R]) {
    if constexpr (HALF >= 1) {
        unrolled<0, R / 2>([&](auto ic) {
            constexpr int i = decltype(ic)::value;
            constexpr int k = i % HALF;
            constexpr int lo = (i / HALF) * 2 * HALF + k;
            constexpr int hi = lo + HALF;
            const float2 p = v[lo];
            const float2 q = v[hi];
            v[lo] = make_float2(p.x + q.x, p.y + q.y);
            const float2 d = make_float2(p.x - q.x, p.y - q.y);
            if constexpr (k == 0) {
                v[hi] = d;
            } else {
                // w_{2 HALF}^k = exp(-2 pi i e / 16) with e = 8 k / HALF.
                constexpr float wr = cos16(k * (8 / HALF));
                constexpr float wi = -cos16(k * (8 / HALF) + 12);
                v[hi] = cmul(d, make_float2(wr, wi));
            }
        });
        dif_stages<R, HALF / 2>(v);
    }
}

// The R-point DFT (R a power of two <= 16) of the registers, in natural order.
template <int R, int LOG2R>
__device__ __forceinline__ void dft_registers(float2 (&v)[R]) {
    dif_stages<R, R / 2>(v);
    float2 t[R];
    unrolled<0, R>([&](auto ic) { t[decltype(ic)::value] = v[decltype(ic)::value]; });
    unrolled<0, R>([&](auto ic) {
        constexpr int i = decltype(ic)::value;
        constexpr int j = bit_reverse(i, LOG2R);
        v[j] = t[i];
    });
}

__device__ __forceinline__ int pow2_slot(int i) { return i + (i >> 4); }

// The Stockham passes after the first, from stride 2^LOG2NS on.
template <int LOG2N, int LOG2NS>
__device__ __forceinline__ void pow2_passes(float2* buf, const float2* __restrict__ tw, int t) {
    if constexpr (LOG2NS < LOG2N) {
        constexpr int N = 1 << LOG2N;
        constexpr int NS = 1 << LOG2NS;
        constexpr int LOG2R = LOG2N - LOG2NS < 4 ? LOG2N - LOG2NS : 4;
        constexpr int R = 1 << LOG2R;
        constexpr int T = N / 16;
        constexpr int PER = 16 / R;  // butterflies per thread
        float2 v[PER][R];
        unrolled<0, PER>([&](auto ic) {
            constexpr int i = decltype(ic)::value;
            unrolled<0, R>([&](auto rc) {
                constexpr int r = decltype(rc)::value;
                v[i][r] = buf[pow2_slot(t + i * T + r * (N / R))];
            });
        });
        __syncthreads();
        unrolled<0, PER>([&](auto ic) {
            constexpr int i = decltype(ic)::value;
            const int j = t + i * T;
            const int jm = j & (NS - 1);
            unrolled<1, R>([&](auto rc) {
                constexpr int r = decltype(rc)::value;
                v[i][r] = cmul(v[i][r], tw[r * jm * (N / (NS * R))]);
            });
            dft_registers<R, LOG2R>(v[i]);
            const int d = ((j >> LOG2NS) << (LOG2NS + LOG2R)) + jm;
            unrolled<0, R>([&](auto rc) {
                constexpr int r = decltype(rc)::value;
                buf[pow2_slot(d + r * NS)] = v[i][r];
            });
        });
        __syncthreads();
        pow2_passes<LOG2N, LOG2NS + LOG2R>(buf, tw, t);
    }
}

// Where frame g (of the flattened [batch * n_frames]) starts in x, and whether all its samples
// are inside the signal (no padding to apply).
struct FrameOrigin {
    const float* row;
    long long start;
    bool valid;
    bool inside;
};

__device__ __forceinline__ FrameOrigin frame_origin(const float* x, long long g, long long total,
                                                    long long length, int n_fft, int hop,
                                                    long long n_frames, long long pad) {
    FrameOrigin o{x, 0, g < total, false};
    if (!o.valid) return o;
    const long long b = g / n_frames;
    o.row = x + b * length;
    o.start = (g - b * n_frames) * hop - pad;
    o.inside = o.start >= 0 && o.start + n_fft <= length;
    return o;
}

__device__ __forceinline__ float origin_sample(const FrameOrigin& o, int n, long long length,
                                               int reflect) {
    if (!o.valid) return 0.0f;
    long long s = o.start + n;
    if (!o.inside) {
        if (reflect) {
            if (s < 0) s = -s;
            if (s >= length) s = 2 * (length - 1) - s;
        } else if (s < 0 || s >= length) {
            return 0.0f;
        }
    }
    return o.row[s];
}

template <int LOG2N>
__device__ __forceinline__ void stft_pow2(const float* __restrict__ x,
                                          const float* __restrict__ window,
                                          const float2* __restrict__ tw, float* a, float* b_out,
                                          long long batch, long long length, int hop,
                                          long long n_frames, long long pad, int reflect,
                                          int mode) {
    constexpr int N = 1 << LOG2N;
    constexpr int T = N / 16;
    constexpr int G = 256 / T;
    constexpr int F = 2 * G;  // frames per block
    constexpr int STRIDE = N + N / 16 + 1;
    extern __shared__ float2 pow2_shared[];
    const int g = threadIdx.x / T;
    const int t = threadIdx.x - g * T;
    float2* buf = pow2_shared + g * STRIDE;
    const long long total = batch * n_frames;
    const long long g0 = static_cast<long long>(blockIdx.x) * F;

    // First pass (stride 1, radix 16) straight from the signal.
    const FrameOrigin fa = frame_origin(x, g0 + 2 * g, total, length, N, hop, n_frames, pad);
    const FrameOrigin fb = frame_origin(x, g0 + 2 * g + 1, total, length, N, hop, n_frames, pad);
    float2 v[16];
    unrolled<0, 16>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        const int n = t + r * T;
        const float w = window[n];
        v[r] = make_float2(origin_sample(fa, n, length, reflect) * w,
                           origin_sample(fb, n, length, reflect) * w);
    });
    dft_registers<16, 4>(v);
    unrolled<0, 16>([&](auto rc) {
        constexpr int r = decltype(rc)::value;
        buf[pow2_slot(t * 16 + r)] = v[r];
    });
    __syncthreads();
    pow2_passes<LOG2N, 4>(buf, tw, t);

    // Thread i writes bins i / F, i / F + 256 / F, ... of frame i % F: neighbouring threads write
    // neighbouring frames of one bin, the contiguous direction of the output.
    constexpr int NB = N / 2 + 1;
    const int j = threadIdx.x % F;
    const long long gj = g0 + j;
    if (gj >= total) return;
    const long long bj = gj / n_frames;
    const long long o0 = bj * NB * n_frames + (gj - bj * n_frames);
    const float2* z = pow2_shared + (j >> 1) * STRIDE;
    for (int k = threadIdx.x / F; k < NB; k += 256 / F) {
        const float2 p = z[pow2_slot(k)];
        const float2 q = z[pow2_slot((N - k) & (N - 1))];  // conj taken below
        const float2 bin = unpack_real_pair(p, q, j);
        const float re = bin.x, im = bin.y;
        const long long o = o0 + k * n_frames;
        store_spectrum(a, b_out, o, re, im, mode);
    }
}

}  // namespace

// The shared memory of audio_stft_pow2_<N>_f32, in complex values, is
// (4096 / N) * (N + N / 16 + 1): at most 4352 + 64 (35 KiB), under the 48 KiB default.
PGK_CONSTANT(AUDIO_POW2_THREADS, 256);
PGK_CONSTANT(AUDIO_POW2_MIN_LOG2, 6);
PGK_CONSTANT(AUDIO_POW2_MAX_LOG2, 12);

#define PGK_STFT_POW2(N, LOG2N)                                                               \
    PGK_KERNEL_BOUNDS(audio_stft_pow2_##N##_f32,                                              \
                      (const float* x, const float* window, const float2* twiddles, float* a, \
                       float* b_out, long long batch, long long length, int hop,              \
                       long long n_frames, long long pad, int reflect, int mode),             \
                      256, 4) {                                                               \
        stft_pow2<LOG2N>(x, window, twiddles, a, b_out, batch, length, hop, n_frames, pad,    \
                         reflect, mode);                                                      \
    }
PGK_STFT_POW2(64, 6)
PGK_STFT_POW2(128, 7)
PGK_STFT_POW2(256, 8)
PGK_STFT_POW2(512, 9)
PGK_STFT_POW2(1024, 10)
PGK_STFT_POW2(2048, 11)
PGK_STFT_POW2(4096, 12)
#undef PGK_STFT_POW2
