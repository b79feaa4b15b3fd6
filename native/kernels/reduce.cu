// Reductions (built-in runtime kernel): reduce_<op>_<in>(...) over a C-contiguous [O, R, I]
// layout, reducing R for every (o, i). Host side: native/ops/reduce.cpp.
//
// A group of TX * TY threads covers TX consecutive columns i (TX = 1 when I == 1, else up to 32)
// of one o, with TY threads walking R (TY = 256 / TX when I > 1; 32..256 by row length when
// I == 1, so a 256-thread block takes 8 short rows, a warp each): when I == 1 consecutive threads
// read consecutive elements of a row (16-byte vector loads on aligned rows), when I > 1 a warp
// reads 32 consecutive columns of one r; both are coalesced, so a reduction over axis 0 of a 2-D
// array is column-parallel, not a transpose. gridDim.y splits R into S chunks; with S > 1 the
// block writes a partial [O, S, I] and the host runs the combining kernel over it (R' = S).
// The tree inside a block and the split points depend only on the shape and launch, never on
// timing: results are bitwise reproducible (no atomics).
//
// Accumulators: float for float/half/bfloat16, double for double, long long for integers
// (sum/prod), the input type for max/min/argmax/argmin (float for halves), unsigned char 0/1
// for all/any. `sumf` sums integers in double (mean/var of ints); `sqdev` sums (x - center)^2
// with the per-output mean in `center` (variance). The final pass multiplies by `scale` and,
// with post == 1, takes the square root (float accumulators only).
#include "dtype_convert.cuh"  // widen: half types to float

template <typename A>
__device__ __forceinline__ bool is_nan(A x) {
    return x != x;
}

template <typename A>
struct Limits;
template <>
struct Limits<float> {
    __device__ static float lowest() { return -__int_as_float(0x7f800000); }
    __device__ static float highest() { return __int_as_float(0x7f800000); }
};
template <>
struct Limits<double> {
    __device__ static double lowest() { return -__longlong_as_double(0x7ff0000000000000LL); }
    __device__ static double highest() { return __longlong_as_double(0x7ff0000000000000LL); }
};
template <>
struct Limits<signed char> {
    __device__ static signed char lowest() { return -128; }
    __device__ static signed char highest() { return 127; }
};
template <>
struct Limits<short> {
    __device__ static short lowest() { return -32768; }
    __device__ static short highest() { return 32767; }
};
template <>
struct Limits<int> {
    __device__ static int lowest() { return -2147483647 - 1; }
    __device__ static int highest() { return 2147483647; }
};
template <>
struct Limits<long long> {
    __device__ static long long lowest() { return -9223372036854775807LL - 1; }
    __device__ static long long highest() { return 9223372036854775807LL; }
};
template <>
struct Limits<unsigned char> {
    __device__ static unsigned char lowest() { return 0; }
    __device__ static unsigned char highest() { return 255; }
};

constexpr long long kNoIndex = 9223372036854775807LL;

// Each op: the accumulator's identity, how an input element enters it, and how two accumulators
// (value, index) combine. Index-carrying ops set kArg.
template <typename A>
struct SumOp {
    static constexpr bool kArg = false;
    __device__ static A identity() { return A(0); }
    template <typename W>
    __device__ static A element(W x, A) {
        return static_cast<A>(x);
    }
    __device__ static void combine(A& a, long long&, A b, long long) { a += b; }
};

template <typename A>
struct ProdOp {
    static constexpr bool kArg = false;
    __device__ static A identity() { return A(1); }
    template <typename W>
    __device__ static A element(W x, A) {
        return static_cast<A>(x);
    }
    __device__ static void combine(A& a, long long&, A b, long long) { a *= b; }
};

template <typename A>
struct SqDevOp {
    static constexpr bool kArg = false;
    __device__ static A identity() { return A(0); }
    template <typename W>
    __device__ static A element(W x, A center) {
        const A d = static_cast<A>(x) - center;
        return d * d;
    }
    __device__ static void combine(A& a, long long&, A b, long long) { a += b; }
};

template <typename A, bool kMax>
struct ExtremeOp {
    static constexpr bool kArg = false;
    __device__ static A identity() { return kMax ? Limits<A>::lowest() : Limits<A>::highest(); }
    template <typename W>
    __device__ static A element(W x, A) {
        return static_cast<A>(x);
    }
    // NaN wins (NumPy's maximum/minimum propagate it).
    __device__ static void combine(A& a, long long&, A b, long long) {
        if (is_nan(a)) return;
        if (is_nan(b) || (kMax ? b > a : b < a)) a = b;
    }
};

template <typename A, bool kMax>
struct ArgOp {
    static constexpr bool kArg = true;
    __device__ static A identity() { return kMax ? Limits<A>::lowest() : Limits<A>::highest(); }
    template <typename W>
    __device__ static A element(W x, A) {
        return static_cast<A>(x);
    }
    // The first NaN wins; else the extreme value; ties go to the smaller index.
    __device__ static void combine(A& a, long long& ai, A b, long long bi) {
        bool take;
        if (is_nan(a)) {
            take = is_nan(b) && bi < ai;
        } else if (is_nan(b)) {
            take = true;
        } else {
            take = (kMax ? b > a : b < a) || (b == a && bi < ai);
        }
        if (take) {
            a = b;
            ai = bi;
        }
    }
};

template <bool kAll>
struct LogicalOp {
    static constexpr bool kArg = false;
    __device__ static unsigned char identity() { return kAll ? 1 : 0; }
    template <typename W>
    __device__ static unsigned char element(W x, unsigned char) {
        return x != W(0) ? 1 : 0;  // NaN != 0: true, as NumPy
    }
    __device__ static void combine(unsigned char& a, long long&, unsigned char b, long long) {
        a = kAll ? (a & b) : (a | b);
    }
};

template <typename A>
__device__ __forceinline__ A finalize(A v, double scale, int post) {
    return v;
}
template <>
__device__ __forceinline__ float finalize(float v, double scale, int post) {
    if (scale != 1.0) v = static_cast<float>(static_cast<double>(v) * scale);
    return post == 1 ? sqrtf(v) : v;
}
template <>
__device__ __forceinline__ double finalize(double v, double scale, int post) {
    if (scale != 1.0) v = v * scale;
    return post == 1 ? sqrt(v) : v;
}

template <typename T, int V>
struct alignas(16) Vec {
    T v[V];
};

constexpr int kThreads = 256;

template <class Op, typename In, typename A>
__device__ void reduce_impl(const In* __restrict__ in, const long long* __restrict__ in_idx,
                            const A* __restrict__ center, A* __restrict__ out,
                            long long* __restrict__ out_idx, long long O, long long R, long long I,
                            long long chunk, int tx_count, int ty_count, int vec, double scale,
                            int post) {
    __shared__ A s_val[kThreads];
    __shared__ long long s_idx[Op::kArg ? kThreads : 1];

    // 32-bit block arithmetic (grids stay below 2^31 blocks): 64-bit division is a subroutine.
    // Threads form groups of tx_count * ty_count (several short rows per block when I == 1).
    const int group_size = tx_count * ty_count;
    const int lane = threadIdx.x % group_size;
    const unsigned tiles = static_cast<unsigned>((I + tx_count - 1) / tx_count);
    const long long o = static_cast<long long>(blockIdx.x / tiles) * (kThreads / group_size) +
                        threadIdx.x / group_size;
    const long long i = static_cast<long long>(blockIdx.x % tiles) * tx_count + lane % tx_count;
    const int ty = lane / tx_count;
    const long long S = gridDim.y;
    const long long s = blockIdx.y;
    const long long r_begin = s * chunk;
    const long long r_end = r_begin + chunk < R ? r_begin + chunk : R;

    A acc = Op::identity();
    long long acc_i = kNoIndex;
    if (i < I && o < O) {
        const A c = center != nullptr ? center[o * I + i] : A(0);
        const In* base = in + o * R * I + i;
        long long r = r_begin + ty;
        // Vector loads for the plain ops on 2-byte and wider types (the others stay small).
        if constexpr (!Op::kArg && sizeof(In) >= 2) {
            if (vec) {
                // I == 1, the row base 16-byte aligned and chunk a multiple of V: 16-byte vector
                // loads, U of them in flight per thread: 128 bytes for 4- and 8-byte types, 64
                // for 2-byte ones. Each vector lane e has its own accumulator,
                // combined in a fixed order at the end (still bitwise reproducible), so the adds
                // of one step form V short chains instead of one chain of U * V dependent adds
                // that held the thread's next loads back by ~U * V * 4 cycles. What it should buy:
                // the last ~2% against PyTorch on a 1 GiB sum (max, whose chain is no longer,
                // already matched), from more requests in flight per SM at the same occupancy.
                constexpr int V = 16 / sizeof(In);
                constexpr int U = sizeof(In) >= 4 ? 8 : 4;  // splits are whole steps: reduce.cpp
                const long long nvec = (r_end - r_begin) / V;
                const Vec<In, V>* vb = reinterpret_cast<const Vec<In, V>*>(base + r_begin);
                A lanes[V];
                long long unused = kNoIndex;
#pragma unroll
                for (int e = 0; e < V; ++e) lanes[e] = Op::identity();
                long long k = ty;
                for (; k + (U - 1) * ty_count < nvec; k += U * ty_count) {
                    Vec<In, V> q[U];
#pragma unroll
                    for (int u = 0; u < U; ++u) q[u] = vb[k + u * ty_count];
#pragma unroll
                    for (int u = 0; u < U; ++u) {
#pragma unroll
                        for (int e = 0; e < V; ++e) {
                            Op::combine(lanes[e], unused, Op::element(widen(q[u].v[e]), c), 0);
                        }
                    }
                }
                r = r_begin + nvec * V + ty;
                for (long long t = k; t < nvec; t += ty_count) {
                    const Vec<In, V> q = vb[t];
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        Op::combine(lanes[e], unused, Op::element(widen(q.v[e]), c), 0);
                    }
                }
#pragma unroll
                for (int e = 0; e < V; ++e) Op::combine(acc, acc_i, lanes[e], 0);
            }
        }
        for (; r < r_end; r += ty_count) {
            const long long idx = in_idx != nullptr ? in_idx[(o * R + r) * I + i] : r;
            Op::combine(acc, acc_i, Op::element(widen(base[r * I]), c), idx);
        }
    }
    s_val[threadIdx.x] = acc;
    if (Op::kArg) s_idx[threadIdx.x] = acc_i;
    __syncthreads();
    for (int half = ty_count / 2; half > 0; half /= 2) {
        if (ty < half) {
            A a = s_val[threadIdx.x];
            long long ai = Op::kArg ? s_idx[threadIdx.x] : 0;
            const int other = threadIdx.x + half * tx_count;
            Op::combine(a, ai, s_val[other], Op::kArg ? s_idx[other] : 0);
            s_val[threadIdx.x] = a;
            if (Op::kArg) s_idx[threadIdx.x] = ai;
        }
        __syncthreads();
    }
    if (ty == 0 && i < I && o < O) {
        const long long dst = (o * S + s) * I + i;
        out[dst] = S == 1 ? finalize(s_val[threadIdx.x], scale, post) : s_val[threadIdx.x];
        if (Op::kArg) out_idx[dst] = s_idx[threadIdx.x];
    }
}

#define PGK_REDUCE(name, OpT, In, A)                                                             \
    extern "C" __global__ void __launch_bounds__(kThreads)                                       \
        name(const In* in, const long long* in_idx, const A* center, A* out, long long* out_idx, \
             long long O, long long R, long long I, long long chunk, int tx_count, int ty_count, \
             int vec, double scale, int post) {                                                  \
        reduce_impl<OpT, In, A>(in, in_idx, center, out, out_idx, O, R, I, chunk, tx_count,      \
                                ty_count, vec, scale, post);                                     \
    }

// Sum-like ops: float accumulators for float/half types, double for double, long long for ints.
#define PGK_SUMLIKE(op, Op)                                             \
    PGK_REDUCE(reduce_##op##_f64, Op<double>, double, double)           \
    PGK_REDUCE(reduce_##op##_f32, Op<float>, float, float)              \
    PGK_REDUCE(reduce_##op##_f16, Op<float>, __half, float)             \
    PGK_REDUCE(reduce_##op##_bf16, Op<float>, __nv_bfloat16, float)     \
    PGK_REDUCE(reduce_##op##_i8, Op<long long>, signed char, long long) \
    PGK_REDUCE(reduce_##op##_i16, Op<long long>, short, long long)      \
    PGK_REDUCE(reduce_##op##_i32, Op<long long>, int, long long)        \
    PGK_REDUCE(reduce_##op##_i64, Op<long long>, long long, long long)  \
    PGK_REDUCE(reduce_##op##_u8, Op<long long>, unsigned char, long long)

PGK_SUMLIKE(sum, SumOp)
PGK_SUMLIKE(prod, ProdOp)

// Integers summed in double (mean and variance of integers).
PGK_REDUCE(reduce_sumf_i8, SumOp<double>, signed char, double)
PGK_REDUCE(reduce_sumf_i16, SumOp<double>, short, double)
PGK_REDUCE(reduce_sumf_i32, SumOp<double>, int, double)
PGK_REDUCE(reduce_sumf_i64, SumOp<double>, long long, double)
PGK_REDUCE(reduce_sumf_u8, SumOp<double>, unsigned char, double)

// Squared deviations from `center`: float for float/half types, double for double and ints.
PGK_REDUCE(reduce_sqdev_f64, SqDevOp<double>, double, double)
PGK_REDUCE(reduce_sqdev_f32, SqDevOp<float>, float, float)
PGK_REDUCE(reduce_sqdev_f16, SqDevOp<float>, __half, float)
PGK_REDUCE(reduce_sqdev_bf16, SqDevOp<float>, __nv_bfloat16, float)
PGK_REDUCE(reduce_sqdev_i8, SqDevOp<double>, signed char, double)
PGK_REDUCE(reduce_sqdev_i16, SqDevOp<double>, short, double)
PGK_REDUCE(reduce_sqdev_i32, SqDevOp<double>, int, double)
PGK_REDUCE(reduce_sqdev_i64, SqDevOp<double>, long long, double)
PGK_REDUCE(reduce_sqdev_u8, SqDevOp<double>, unsigned char, double)

// Ordered ops keep the input type (float for half types).
template <typename A>
using MaxOp = ExtremeOp<A, true>;
template <typename A>
using MinOp = ExtremeOp<A, false>;
template <typename A>
using ArgMaxOp = ArgOp<A, true>;
template <typename A>
using ArgMinOp = ArgOp<A, false>;

#define PGK_ORDERED(op, Op)                                                 \
    PGK_REDUCE(reduce_##op##_f64, Op<double>, double, double)               \
    PGK_REDUCE(reduce_##op##_f32, Op<float>, float, float)                  \
    PGK_REDUCE(reduce_##op##_f16, Op<float>, __half, float)                 \
    PGK_REDUCE(reduce_##op##_bf16, Op<float>, __nv_bfloat16, float)         \
    PGK_REDUCE(reduce_##op##_i8, Op<signed char>, signed char, signed char) \
    PGK_REDUCE(reduce_##op##_i16, Op<short>, short, short)                  \
    PGK_REDUCE(reduce_##op##_i32, Op<int>, int, int)                        \
    PGK_REDUCE(reduce_##op##_i64, Op<long long>, long long, long long)      \
    PGK_REDUCE(reduce_##op##_u8, Op<unsigned char>, unsigned char, unsigned char)

PGK_ORDERED(max, MaxOp)
PGK_ORDERED(min, MinOp)
PGK_ORDERED(argmax, ArgMaxOp)
PGK_ORDERED(argmin, ArgMinOp)

using AllOp = LogicalOp<true>;
using AnyOp = LogicalOp<false>;

#define PGK_LOGICAL(op, Op)                                          \
    PGK_REDUCE(reduce_##op##_f64, Op, double, unsigned char)         \
    PGK_REDUCE(reduce_##op##_f32, Op, float, unsigned char)          \
    PGK_REDUCE(reduce_##op##_f16, Op, __half, unsigned char)         \
    PGK_REDUCE(reduce_##op##_bf16, Op, __nv_bfloat16, unsigned char) \
    PGK_REDUCE(reduce_##op##_i8, Op, signed char, unsigned char)     \
    PGK_REDUCE(reduce_##op##_i16, Op, short, unsigned char)          \
    PGK_REDUCE(reduce_##op##_i32, Op, int, unsigned char)            \
    PGK_REDUCE(reduce_##op##_i64, Op, long long, unsigned char)      \
    PGK_REDUCE(reduce_##op##_u8, Op, unsigned char, unsigned char)

PGK_LOGICAL(all, AllOp)
PGK_LOGICAL(any, AnyOp)
