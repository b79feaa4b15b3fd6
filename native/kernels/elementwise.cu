// Elementwise ops (built-in runtime kernels): binary ops (arithmetic, comparisons, bitwise,
// shifts), unary math and activations, and where(). One entry point per (op, dtype):
//   ew_<op>_<dtype>(R* out, const T* a, const T* b, u64 a_bits, u64 b_bits, EwLayout, n, mode)
//   un_<op>_<dtype>(R* out, const T* a, EwLayout, n, mode)
//   where_<dtype>(T* out, const bool* c, const T* x, const T* y, u64 x_bits, u64 y_bits,
//                 EwLayout, n, mode)
// mode bits: kScalarA / kScalarB (that operand is the value in *_bits, not memory), kContiguous
// (every array operand and the output are C-contiguous with the output's shape: a flat index).
// The contiguous path moves 16 bytes per load and store where the pointers allow it, then
// finishes the tail (and misaligned views) element by element; everything else walks an N-d
// index (N <= 8, element strides, 0 for broadcast axes). Half types compute in float.
// Integer semantics follow NumPy: floor_divide / mod by zero give 0, shifts past the width
// give 0 (or -1 for negative values shifted right), wrap-around on overflow.
#include "dtype_convert.cuh"

typedef unsigned long long u64;

// Must match EwLayout in native/ops/elementwise.hpp.
struct EwLayout {
    int ndim;
    long long shape[8];
    long long strides[4][8];  // element strides: output, then the inputs in order
};

constexpr int kScalarA = 1, kScalarB = 2, kContiguous = 4;

// ---- type plumbing ------------------------------------------------------------------------
// Wide, widen and To: dtype_convert.cuh.

template <typename T>
__device__ __forceinline__ T from_bits(u64 bits) {
    T v;
    memcpy(&v, &bits, sizeof(T));
    return v;
}

// ---- math on float / double -----------------------------------------------------------------
#define PGK_MATH1(name, ffn, dfn)                                         \
    __device__ __forceinline__ float m_##name(float x) { return ffn(x); } \
    __device__ __forceinline__ double m_##name(double x) { return dfn(x); }
PGK_MATH1(exp, expf, exp)
PGK_MATH1(exp2, exp2f, exp2)
PGK_MATH1(log, logf, log)
PGK_MATH1(log2, log2f, log2)
PGK_MATH1(log10, log10f, log10)
PGK_MATH1(log1p, log1pf, log1p)
PGK_MATH1(expm1, expm1f, expm1)
PGK_MATH1(sqrt, sqrtf, sqrt)
PGK_MATH1(rsqrt, rsqrtf, rsqrt)
PGK_MATH1(sin, sinf, sin)
PGK_MATH1(cos, cosf, cos)
PGK_MATH1(tan, tanf, tan)
PGK_MATH1(tanh, tanhf, tanh)
PGK_MATH1(erf, erff, erf)
PGK_MATH1(floor, floorf, floor)
PGK_MATH1(ceil, ceilf, ceil)
PGK_MATH1(trunc, truncf, trunc)
PGK_MATH1(rint, rintf, rint)
PGK_MATH1(fabs, fabsf, fabs)
#undef PGK_MATH1
__device__ __forceinline__ float m_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double m_fmod(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }
__device__ __forceinline__ float m_copysign(float a, float b) { return copysignf(a, b); }
__device__ __forceinline__ double m_copysign(double a, double b) { return copysign(a, b); }

template <typename W>
struct IsFloat {
    static constexpr bool value = false;
};
template <>
struct IsFloat<float> {
    static constexpr bool value = true;
};
template <>
struct IsFloat<double> {
    static constexpr bool value = true;
};

template <typename T>
struct IsSigned {
    static constexpr bool value = T(-1) < T(0);
};

// -x with two's-complement wrap-around (NumPy's result for the most negative integer), without
// the undefined behaviour of signed overflow.
template <typename W>
__device__ __forceinline__ W neg_wrap(W x) {
    if constexpr (IsFloat<W>::value)
        return -x;
    else
        return static_cast<W>(0ULL - static_cast<unsigned long long>(x));
}

// NumPy's npy_divmod for floats: floor division and the remainder with the divisor's sign.
template <typename W>
__device__ __forceinline__ W float_floordiv(W a, W b) {
    if (b == W(0)) return a / b;
    W mod = m_fmod(a, b);
    W div = (a - mod) / b;
    if (mod != W(0)) {
        if ((b < W(0)) != (mod < W(0))) div -= W(1);
    }
    if (div != W(0)) {
        W fl = m_floor(div);
        if (div - fl > W(0.5)) fl += W(1);
        return fl;
    }
    return m_copysign(W(0), a / b);
}
template <typename W>
__device__ __forceinline__ W float_mod(W a, W b) {
    if (b == W(0)) return m_fmod(a, b);
    W mod = m_fmod(a, b);
    if (mod != W(0)) {
        if ((b < W(0)) != (mod < W(0))) mod += b;
        return mod;
    }
    return m_copysign(W(0), b);
}

// ---- binary ops: Op::f<T>(W a, W b), T the storage type, W its computing type ---------------
#define PGK_BINOP(Name, expr)                                \
    struct Name {                                            \
        template <typename T, typename W>                    \
        __device__ static __forceinline__ auto f(W a, W b) { \
            return expr;                                     \
        }                                                    \
    };
PGK_BINOP(Add, a + b)
PGK_BINOP(Sub, a - b)
PGK_BINOP(Mul, a* b)
PGK_BINOP(Div, a / b)
PGK_BINOP(Eq, a == b)
PGK_BINOP(Ne, a != b)
PGK_BINOP(Lt, a < b)
PGK_BINOP(Le, a <= b)
PGK_BINOP(Gt, a > b)
PGK_BINOP(Ge, a >= b)
PGK_BINOP(LogicalAnd, (a != W(0)) && (b != W(0)))
PGK_BINOP(LogicalOr, (a != W(0)) || (b != W(0)))
PGK_BINOP(LogicalXor, (a != W(0)) != (b != W(0)))
PGK_BINOP(BitAnd, a& b)
PGK_BINOP(BitOr, a | b)
PGK_BINOP(BitXor, a ^ b)
#undef PGK_BINOP

// NaN-propagating maximum / minimum (NumPy's maximum, not fmax).
struct Max {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W a, W b) {
        return (a != a || a > b) ? a : b;
    }
};
struct Min {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W a, W b) {
        return (a != a || a < b) ? a : b;
    }
};

struct FloorDiv {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W a, W b) {
        if constexpr (IsFloat<W>::value) {
            return float_floordiv(a, b);
        } else {
            if (b == W(0)) return W(0);
            if constexpr (IsSigned<W>::value) {
                if (b == W(-1)) return neg_wrap(a);  // wraps like NumPy at the minimum
            }
            W q = a / b;
            if (IsSigned<W>::value && (a % b != W(0)) && ((a < W(0)) != (b < W(0)))) q -= W(1);
            return q;
        }
    }
};
struct Mod {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W a, W b) {
        if constexpr (IsFloat<W>::value) {
            return float_mod(a, b);
        } else {
            if (b == W(0)) return W(0);
            if constexpr (IsSigned<W>::value) {
                if (b == W(-1)) return W(0);
            }
            W r = a % b;
            if (IsSigned<W>::value && r != W(0) && ((r < W(0)) != (b < W(0)))) r += b;
            return r;
        }
    }
};
struct Pow {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W a, W b) {
        if constexpr (IsFloat<W>::value) {
            return m_pow(a, b);
        } else {
            if constexpr (IsSigned<W>::value) {
                if (b < W(0)) {  // NumPy refuses this; the exact answer where it is an integer
                    if (a == W(1)) return W(1);
                    if (a == W(-1)) return (b & W(1)) ? W(-1) : W(1);
                    return W(0);
                }
            }
            W result = W(1), base = a;
            while (b) {
                if (b & W(1)) result = static_cast<W>(result * base);
                base = static_cast<W>(base * base);
                b = static_cast<W>(b >> 1);
            }
            return result;
        }
    }
};
struct Shl {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W a, W b) {
        return (static_cast<u64>(b) < sizeof(T) * 8) ? static_cast<W>(a << b) : W(0);
    }
};
struct Shr {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W a, W b) {
        if (static_cast<u64>(b) < sizeof(T) * 8) return static_cast<W>(a >> b);
        return (IsSigned<W>::value && a < W(0)) ? W(-1) : W(0);
    }
};

// ---- unary ops ---------------------------------------------------------------------------
#define PGK_UNOP(Name, expr)                            \
    struct Name {                                       \
        template <typename T, typename W>               \
        __device__ static __forceinline__ auto f(W x) { \
            return expr;                                \
        }                                               \
    };
PGK_UNOP(Neg, neg_wrap(x))
PGK_UNOP(Exp, m_exp(x))
PGK_UNOP(Exp2, m_exp2(x))
PGK_UNOP(Log, m_log(x))
PGK_UNOP(Log2, m_log2(x))
PGK_UNOP(Log10, m_log10(x))
PGK_UNOP(Log1p, m_log1p(x))
PGK_UNOP(Expm1, m_expm1(x))
PGK_UNOP(Sqrt, m_sqrt(x))
PGK_UNOP(Rsqrt, m_rsqrt(x))
PGK_UNOP(Square, static_cast<W>(x* x))
PGK_UNOP(Reciprocal, W(1) / x)
PGK_UNOP(Sin, m_sin(x))
PGK_UNOP(Cos, m_cos(x))
PGK_UNOP(Tan, m_tan(x))
PGK_UNOP(Tanh, m_tanh(x))
PGK_UNOP(Sigmoid, W(1) / (W(1) + m_exp(-x)))
PGK_UNOP(Silu, x / (W(1) + m_exp(-x)))
PGK_UNOP(GeluTanh,
         W(0.5) * x * (W(1) + m_tanh(W(0.7978845608028654) * (x + W(0.044715) * x * x * x))))
PGK_UNOP(GeluErf, W(0.5) * x * (W(1) + m_erf(x * W(0.7071067811865476))))
PGK_UNOP(Floor, m_floor(x))
PGK_UNOP(Ceil, m_ceil(x))
PGK_UNOP(Round, m_rint(x))
PGK_UNOP(Trunc, m_trunc(x))
PGK_UNOP(IsNan, x != x)
PGK_UNOP(IsInf, x == x && (x - x) != (x - x))
PGK_UNOP(IsFinite, (x - x) == (x - x))
#undef PGK_UNOP
struct Abs {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W x) {
        if constexpr (IsFloat<W>::value)
            return m_fabs(x);
        else
            return x < W(0) ? neg_wrap(x) : x;
    }
};
struct Relu {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W x) {
        return (x != x || x > W(0)) ? x : W(0);
    }
};
struct Sign {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W x) {
        if (x != x) return x;
        return x > W(0) ? W(1) : (x < W(0) ? W(-1) : W(0));
    }
};
struct Invert {
    template <typename T, typename W>
    __device__ static __forceinline__ W f(W x) {
        if constexpr (sizeof(W) == 1 && W(2) == W(1))
            return !x;  // bool
        else
            return static_cast<W>(~x);
    }
};

// ---- the loops ---------------------------------------------------------------------------
template <typename T>
struct alignas(16) Vec {
    static constexpr int V = 16 / sizeof(T);
    T v[V];
};
template <typename R, int V>
struct alignas((V * sizeof(R)) < 16 ? (V * sizeof(R)) : 16) OutVec {
    R v[V];
};

// The scalar flags are re-read opaquely inside each loop: otherwise the compiler unswitches every
// loop into one copy per flag combination, doubling the code of ~300 kernels for no speed.
__device__ __forceinline__ int opaque(int v) {
    asm volatile("" : "+r"(v));
    return v;
}

__device__ __forceinline__ bool aligned(const void* p, unsigned a) {
    return (reinterpret_cast<u64>(p) & (a - 1)) == 0;
}

// Element offsets of flat index i in each operand (0 = output). The strided path runs in 32-bit
// index math (the host sends larger strided problems through contiguous copies): 64-bit division
// would dominate both the time and the code size of every kernel.
__device__ __forceinline__ void strided_offsets(const EwLayout& l, unsigned i, long long* off) {
    off[0] = off[1] = off[2] = off[3] = 0;
#pragma unroll 1
    for (int d = l.ndim - 1; d >= 0; --d) {
        const unsigned extent = static_cast<unsigned>(l.shape[d]);
        const unsigned q = i / extent;
        const long long idx = i - q * extent;
        i = q;
        off[0] += idx * l.strides[0][d];
        off[1] += idx * l.strides[1][d];
        off[2] += idx * l.strides[2][d];
        off[3] += idx * l.strides[3][d];
    }
}

// Expensive element functions (transcendentals, integer loops) are called out of line so the
// unrolled vector loop, the tail and the strided loop share one body; cheap ones are inlined.
template <typename Op>
struct Heavy {
    static constexpr bool value = false;
};

template <typename Op, typename T, typename R>
__device__ __noinline__ R apply2_call(T a, T b) {
    return To<R>::from(Op::template f<T>(widen(a), widen(b)));
}
template <typename Op, typename T, typename R>
__device__ __noinline__ R apply1_call(T a) {
    return To<R>::from(Op::template f<T>(widen(a)));
}

template <typename Op, typename T, typename R>
__device__ __forceinline__ R apply2(T a, T b) {
    if constexpr (Heavy<Op>::value)
        return apply2_call<Op, T, R>(a, b);
    else
        return To<R>::from(Op::template f<T>(widen(a), widen(b)));
}
template <typename Op, typename T, typename R>
__device__ __forceinline__ R apply1(T a) {
    if constexpr (Heavy<Op>::value)
        return apply1_call<Op, T, R>(a);
    else
        return To<R>::from(Op::template f<T>(widen(a)));
}

template <typename Op, typename T, typename R>
__device__ void binary_impl(R* out, const T* a, const T* b, u64 a_bits, u64 b_bits,
                            const EwLayout& l, u64 n, int mode) {
    const u64 first = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x;
    const u64 step = static_cast<u64>(gridDim.x) * blockDim.x;
    const bool sa = mode & kScalarA, sb = mode & kScalarB;
    const T av = from_bits<T>(a_bits), bv = from_bits<T>(b_bits);
    if (mode & kContiguous) {
        constexpr int V = Vec<T>::V;
        using O = OutVec<R, V>;
        u64 done = 0;
        if (aligned(out, alignof(O)) && (sa || aligned(a, 16)) && (sb || aligned(b, 16))) {
            const u64 vectors = n / V;
            const Vec<T>* va = reinterpret_cast<const Vec<T>*>(a);
            const Vec<T>* vb = reinterpret_cast<const Vec<T>*>(b);
            O* vo = reinterpret_cast<O*>(out);
            // One loop for array-array and array-scalar (the scalar test is uniform).
            Vec<T> splat_a, splat_b;
#pragma unroll
            for (int k = 0; k < V; ++k) {
                splat_a.v[k] = av;
                splat_b.v[k] = bv;
            }
#pragma unroll 1  // Blackwell would unroll 4x: code size, no bandwidth gain
            for (u64 i = first; i < vectors; i += step) {
                const int m = opaque(mode);
                const Vec<T> x = (m & kScalarA) ? splat_a : va[i];
                const Vec<T> y = (m & kScalarB) ? splat_b : vb[i];
                O o;
#pragma unroll
                for (int k = 0; k < V; ++k) o.v[k] = apply2<Op, T, R>(x.v[k], y.v[k]);
                vo[i] = o;
            }
            done = vectors * V;
        }
        for (u64 i = done + first; i < n; i += step) {
            const int m = opaque(mode);
            out[i] = apply2<Op, T, R>((m & kScalarA) ? av : a[i], (m & kScalarB) ? bv : b[i]);
        }
        return;
    }
    for (u64 i = first; i < n; i += step) {
        long long off[4];
        strided_offsets(l, static_cast<unsigned>(i), off);
        const int m = opaque(mode);
        out[off[0]] =
            apply2<Op, T, R>((m & kScalarA) ? av : a[off[1]], (m & kScalarB) ? bv : b[off[2]]);
    }
}

template <typename Op, typename T, typename R>
__device__ void unary_impl(R* out, const T* a, const EwLayout& l, u64 n, int mode) {
    const u64 first = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x;
    const u64 step = static_cast<u64>(gridDim.x) * blockDim.x;
    if (mode & kContiguous) {
        constexpr int V = Vec<T>::V;
        using O = OutVec<R, V>;
        u64 done = 0;
        if (aligned(out, alignof(O)) && aligned(a, 16)) {
            const u64 vectors = n / V;
            const Vec<T>* va = reinterpret_cast<const Vec<T>*>(a);
            O* vo = reinterpret_cast<O*>(out);
#pragma unroll 1  // Blackwell would unroll 4x: code size, no bandwidth gain
            for (u64 i = first; i < vectors; i += step) {
                const Vec<T> x = va[i];
                O o;
#pragma unroll
                for (int k = 0; k < V; ++k) o.v[k] = apply1<Op, T, R>(x.v[k]);
                vo[i] = o;
            }
            done = vectors * V;
        }
        for (u64 i = done + first; i < n; i += step) {
            out[i] = apply1<Op, T, R>(a[i]);
        }
        return;
    }
    for (u64 i = first; i < n; i += step) {
        long long off[4];
        strided_offsets(l, static_cast<unsigned>(i), off);
        out[off[0]] = apply1<Op, T, R>(a[off[1]]);
    }
}

template <typename T>
__device__ void where_impl(T* out, const bool* c, const T* x, const T* y, u64 x_bits, u64 y_bits,
                           const EwLayout& l, u64 n, int mode) {
    const u64 first = blockIdx.x * static_cast<u64>(blockDim.x) + threadIdx.x;
    const u64 step = static_cast<u64>(gridDim.x) * blockDim.x;
    const T xv = from_bits<T>(x_bits), yv = from_bits<T>(y_bits);
#pragma unroll 1
    for (u64 i = first; i < n; i += step) {
        const int m = opaque(mode);
        long long off[4] = {static_cast<long long>(i), static_cast<long long>(i),
                            static_cast<long long>(i), static_cast<long long>(i)};
        if (!(m & kContiguous)) strided_offsets(l, static_cast<unsigned>(i), off);
        out[off[0]] =
            c[off[1]] ? ((m & kScalarA) ? xv : x[off[2]]) : ((m & kScalarB) ? yv : y[off[3]]);
    }
}

template <>
struct Heavy<FloorDiv> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Mod> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Pow> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Exp> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Exp2> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Log> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Log2> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Log10> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Log1p> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Expm1> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Sqrt> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Rsqrt> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Reciprocal> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Sin> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Cos> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Tan> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Tanh> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Sigmoid> {
    static constexpr bool value = true;
};
template <>
struct Heavy<Silu> {
    static constexpr bool value = true;
};
template <>
struct Heavy<GeluTanh> {
    static constexpr bool value = true;
};
template <>
struct Heavy<GeluErf> {
    static constexpr bool value = true;
};

// ---- entry points ------------------------------------------------------------------------
typedef signed char i8;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef unsigned char u8;
typedef bool b1;
typedef double f64;
typedef float f32;
typedef __half f16;
typedef __nv_bfloat16 bf16;

#define PGK_BIN_R(op, Op, t, R)                                                                 \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        ew_##op##_##t(R* out, const t* a, const t* b, u64 a_bits, u64 b_bits, const EwLayout l, \
                      u64 n, int mode) {                                                        \
        binary_impl<Op, t, R>(out, a, b, a_bits, b_bits, l, n, mode);                           \
    }
#define PGK_BIN(op, Op, t) PGK_BIN_R(op, Op, t, t)
#define PGK_CMP(op, Op, t) PGK_BIN_R(op, Op, t, bool)
#define PGK_UN_R(op, Op, t, R)                                                 \
    extern "C" __global__ void __launch_bounds__(256)                          \
        un_##op##_##t(R* out, const t* a, const EwLayout l, u64 n, int mode) { \
        unary_impl<Op, t, R>(out, a, l, n, mode);                              \
    }
#define PGK_UN(op, Op, t) PGK_UN_R(op, Op, t, t)

#define PGK_FLOATS(M, op, Op) M(op, Op, f64) M(op, Op, f32) M(op, Op, f16) M(op, Op, bf16)
#define PGK_INTS(M, op, Op) M(op, Op, i8) M(op, Op, i16) M(op, Op, i32) M(op, Op, i64) M(op, Op, u8)
#define PGK_NUMERIC(M, op, Op) PGK_FLOATS(M, op, Op) PGK_INTS(M, op, Op)
#define PGK_ALL(M, op, Op) PGK_NUMERIC(M, op, Op) M(op, Op, b1)

#define PGK_WHERE(t)                                                                     \
    extern "C" __global__ void __launch_bounds__(256)                                    \
        where_##t(t* out, const bool* c, const t* x, const t* y, u64 x_bits, u64 y_bits, \
                  const EwLayout l, u64 n, int mode) {                                   \
        where_impl<t>(out, c, x, y, x_bits, y_bits, l, n, mode);                         \
    }

// One entry-point list per line, unformatted to the end of the file.
// clang-format off
PGK_ALL(PGK_BIN, add, Add)
PGK_NUMERIC(PGK_BIN, subtract, Sub)
PGK_ALL(PGK_BIN, multiply, Mul)
PGK_FLOATS(PGK_BIN, divide, Div)
PGK_NUMERIC(PGK_BIN, floor_divide, FloorDiv)
PGK_NUMERIC(PGK_BIN, mod, Mod)
PGK_NUMERIC(PGK_BIN, power, Pow)
PGK_NUMERIC(PGK_BIN, maximum, Max)
PGK_NUMERIC(PGK_BIN, minimum, Min)
PGK_ALL(PGK_CMP, equal, Eq)
PGK_ALL(PGK_CMP, not_equal, Ne)
PGK_ALL(PGK_CMP, less, Lt)
PGK_ALL(PGK_CMP, less_equal, Le)
PGK_CMP(logical_and, LogicalAnd, b1)
PGK_CMP(logical_or, LogicalOr, b1)
PGK_CMP(logical_xor, LogicalXor, b1)
PGK_INTS(PGK_BIN, bitwise_and, BitAnd)
PGK_BIN(bitwise_and, BitAnd, b1)
PGK_INTS(PGK_BIN, bitwise_or, BitOr)
PGK_BIN(bitwise_or, BitOr, b1)
PGK_INTS(PGK_BIN, bitwise_xor, BitXor)
PGK_BIN(bitwise_xor, BitXor, b1)
PGK_INTS(PGK_BIN, left_shift, Shl)
PGK_INTS(PGK_BIN, right_shift, Shr)

PGK_NUMERIC(PGK_UN, negative, Neg)
PGK_FLOATS(PGK_UN, abs, Abs)  // uint8 and bool: a copy, no kernel
PGK_UN(abs, Abs, i8) PGK_UN(abs, Abs, i16) PGK_UN(abs, Abs, i32) PGK_UN(abs, Abs, i64)
PGK_NUMERIC(PGK_UN, square, Square)
PGK_NUMERIC(PGK_UN, sign, Sign)
PGK_NUMERIC(PGK_UN, relu, Relu)
PGK_INTS(PGK_UN, invert, Invert)
PGK_UN(invert, Invert, b1)
PGK_FLOATS(PGK_UN, exp, Exp)
PGK_FLOATS(PGK_UN, exp2, Exp2)
PGK_FLOATS(PGK_UN, log, Log)
PGK_FLOATS(PGK_UN, log2, Log2)
PGK_FLOATS(PGK_UN, log10, Log10)
PGK_FLOATS(PGK_UN, log1p, Log1p)
PGK_FLOATS(PGK_UN, expm1, Expm1)
PGK_FLOATS(PGK_UN, sqrt, Sqrt)
PGK_FLOATS(PGK_UN, rsqrt, Rsqrt)
PGK_FLOATS(PGK_UN, reciprocal, Reciprocal)
PGK_FLOATS(PGK_UN, sin, Sin)
PGK_FLOATS(PGK_UN, cos, Cos)
PGK_FLOATS(PGK_UN, tan, Tan)
PGK_FLOATS(PGK_UN, tanh, Tanh)
PGK_FLOATS(PGK_UN, sigmoid, Sigmoid)
PGK_FLOATS(PGK_UN, gelu_tanh, GeluTanh)
PGK_FLOATS(PGK_UN, gelu_erf, GeluErf)
PGK_FLOATS(PGK_UN, silu, Silu)
PGK_FLOATS(PGK_UN, floor, Floor)
PGK_FLOATS(PGK_UN, ceil, Ceil)
PGK_FLOATS(PGK_UN, round, Round)
PGK_FLOATS(PGK_UN, trunc, Trunc)
#define PGK_UN_B(op, Op, t) PGK_UN_R(op, Op, t, bool)
PGK_FLOATS(PGK_UN_B, isnan, IsNan)
PGK_FLOATS(PGK_UN_B, isinf, IsInf)
PGK_FLOATS(PGK_UN_B, isfinite, IsFinite)
PGK_WHERE(f64) PGK_WHERE(f32) PGK_WHERE(f16) PGK_WHERE(bf16) PGK_WHERE(i8)
PGK_WHERE(i16) PGK_WHERE(i32) PGK_WHERE(i64) PGK_WHERE(u8) PGK_WHERE(b1)
