// Softmax and log-softmax along one axis (built-in runtime kernel): softmax_<dtype> and
// log_softmax_<dtype> over a C-contiguous [O, R, I] layout, normalising R for every (o, i).
// Host side: native/ops/reduce.cpp.
//
// Thread layout as the reductions (reduce.cu): groups of TX consecutive columns i and TY threads
// along R (short rows share a 256-thread block, a warp or more each). Pass 1 keeps an online (max,
// sum of exp(x - max)) per thread and merges them in a fixed shared-memory tree (deterministic);
// pass 2 writes exp(x - m) / s or x - m - log(s). Accumulation in float (double for double); the
// output keeps the input type.
#include "dtype_convert.cuh"  // widen: half types to float

template <typename T>
__device__ __forceinline__ T narrow(float x);
template <>
__device__ __forceinline__ __half narrow<__half>(float x) {
    return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ float narrow<float>(float x) {
    return x;
}

template <typename T, typename A>
__device__ __forceinline__ T store(A x) {
    return narrow<T>(x);
}
template <>
__device__ __forceinline__ double store<double, double>(double x) {
    return x;
}

template <typename A>
__device__ __forceinline__ A neg_inf();
template <>
__device__ __forceinline__ float neg_inf<float>() {
    return -__int_as_float(0x7f800000);
}
template <>
__device__ __forceinline__ double neg_inf<double>() {
    return -__longlong_as_double(0x7ff0000000000000LL);
}

// (m, s) absorbs (m2, s2): the running max and the sum of exp(x - max).
template <typename A>
__device__ __forceinline__ void merge(A& m, A& s, A m2, A s2) {
    if (m2 > m) {
        s = (m == neg_inf<A>() ? A(0) : s * exp(m - m2)) + s2;
        m = m2;
    } else if (m2 == m) {
        s += s2;
    } else if (m2 == m2) {
        s += m2 == neg_inf<A>() ? A(0) : s2 * exp(m2 - m);
    } else {
        m = m2;  // NaN propagates
        s = m2;
    }
}

constexpr int kThreads = 256;

template <typename T, typename A, bool kLog>
__device__ void softmax_impl(const T* __restrict__ in, T* __restrict__ out, long long O,
                             long long R, long long I, int tx_count, int ty_count) {
    __shared__ A s_m[kThreads];
    __shared__ A s_s[kThreads];
    // Groups of tx_count * ty_count threads, one per (o, column tile), as in reduce.cu.
    const int group_size = tx_count * ty_count;
    const int lane = threadIdx.x % group_size;
    const unsigned tiles = static_cast<unsigned>((I + tx_count - 1) / tx_count);
    const long long o = static_cast<long long>(blockIdx.x / tiles) * (kThreads / group_size) +
                        threadIdx.x / group_size;
    const long long i = static_cast<long long>(blockIdx.x % tiles) * tx_count + lane % tx_count;
    const int ty = lane / tx_count;
    const bool live = i < I && o < O;
    const T* src = in + o * R * I + i;
    T* dst = out + o * R * I + i;

    A m = neg_inf<A>(), s = 0;
    if (live) {
        for (long long r = ty; r < R; r += ty_count) merge<A>(m, s, widen(src[r * I]), A(1));
    }
    s_m[threadIdx.x] = m;
    s_s[threadIdx.x] = s;
    __syncthreads();
    for (int half = ty_count / 2; half > 0; half /= 2) {
        if (ty < half) {
            A mm = s_m[threadIdx.x], ss = s_s[threadIdx.x];
            merge<A>(mm, ss, s_m[threadIdx.x + half * tx_count],
                     s_s[threadIdx.x + half * tx_count]);
            s_m[threadIdx.x] = mm;
            s_s[threadIdx.x] = ss;
        }
        __syncthreads();
    }
    const int first = threadIdx.x - ty * tx_count;  // the group's ty == 0 thread of this column
    m = s_m[first];
    s = s_s[first];
    if (!live) return;
    const A shift = kLog ? m + log(s) : m;
    const A inv = kLog ? A(1) : A(1) / s;
    for (long long r = ty; r < R; r += ty_count) {
        const A d = widen(src[r * I]) - shift;
        dst[r * I] = store<T, A>(kLog ? d : exp(d) * inv);
    }
}

#define PGK_SOFTMAX(sfx, T, A)                                                        \
    extern "C" __global__ void __launch_bounds__(kThreads) softmax_##sfx(             \
        const T* in, T* out, long long O, long long R, long long I, int tx, int ty) { \
        softmax_impl<T, A, false>(in, out, O, R, I, tx, ty);                          \
    }                                                                                 \
    extern "C" __global__ void __launch_bounds__(kThreads) log_softmax_##sfx(         \
        const T* in, T* out, long long O, long long R, long long I, int tx, int ty) { \
        softmax_impl<T, A, true>(in, out, O, R, I, tx, ty);                           \
    }

PGK_SOFTMAX(f64, double, double)
PGK_SOFTMAX(f32, float, float)
PGK_SOFTMAX(f16, __half, float)
PGK_SOFTMAX(bf16, __nv_bfloat16, float)
