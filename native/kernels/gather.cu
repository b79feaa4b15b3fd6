// Gathers and masks (built-in runtime kernel), moving bytes without interpreting them, one
// entry point per element size. Host side: native/ops/reduce.cpp.
//
// take_<itemsize>(in, idx, out, O, N, K, I, mode): out[o, k, i] = in[o, idx[k], i] over
// C-contiguous [O, N, I] -> [O, K, I]. mode 0: negatives count from the end (the host checked
// the range); 1: wrap modulo N; 2: clip to [0, N-1]. Out-of-range indices that reach the kernel
// in mode 0 are clipped, so a kernel never reads outside the array.
// tri_<itemsize>(data, B, M, N, k, upper): in place over C-contiguous [B, M, N], zero the
// elements below (upper) or above (!upper) the k-th diagonal.
template <typename T>
__device__ void take_impl(const T* __restrict__ in, const long long* __restrict__ idx,
                          T* __restrict__ out, long long O, long long N, long long K, long long I,
                          int mode) {
    const long long total = O * K * I;
#pragma unroll 1
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long i = e % I;
        const long long ok = e / I;
        const long long k = ok % K, o = ok / K;
        long long j = idx[k];
        if (mode == 1) {
            j %= N;
            if (j < 0) j += N;
        } else if (j < 0 && mode == 0) {
            j += N;
        }
        j = j < 0 ? 0 : (j >= N ? N - 1 : j);
        out[e] = in[(o * N + j) * I + i];
    }
}

template <typename T>
__device__ void tri_impl(T* data, long long B, long long M, long long N, long long k, int upper) {
    const long long total = B * M * N;
#pragma unroll 1
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long col = e % N;
        const long long row = (e / N) % M;
        const bool zero = upper ? col - row < k : col - row > k;
        if (zero) data[e] = T(0);
    }
}

#define PGK_GATHER(size, T)                                                                        \
    extern "C" __global__ void take_##size(const T* in, const long long* idx, T* out, long long O, \
                                           long long N, long long K, long long I, int mode) {      \
        take_impl<T>(in, idx, out, O, N, K, I, mode);                                              \
    }                                                                                              \
    extern "C" __global__ void tri_##size(T* data, long long B, long long M, long long N,          \
                                          long long k, int upper) {                                \
        tri_impl<T>(data, B, M, N, k, upper);                                                      \
    }

PGK_GATHER(1, unsigned char)
PGK_GATHER(2, unsigned short)
PGK_GATHER(4, unsigned int)
PGK_GATHER(8, unsigned long long)
