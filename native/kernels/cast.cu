// Element type conversion between every pair of runtime dtypes (built-in runtime kernel):
// cast_<from>_<to>(const From* in, To* out, n) over contiguous buffers, NumPy's semantics
// (bool -> 0/1, anything -> bool is "!= 0", float -> int truncates).
#include "dtype_convert.cuh"

template <typename S, typename D>
__device__ D convert(S s) {
    return To<D>::from(static_cast<typename Wide<S>::type>(s));
}

// V = 16 / sizeof(S) elements per step: one 16-byte load, V conversions, one store of V outputs.
template <typename S, typename D>
struct CastVector {
    static constexpr int V = 16 / sizeof(S);
    static constexpr int kOutAlign = V * sizeof(D) < 16 ? V * sizeof(D) : 16;
    struct alignas(16) In {
        S v[V];
    };
    struct alignas(kOutAlign) Out {
        D v[V];
    };
};

template <typename S, typename D>
__device__ void cast_impl(const S* in, D* out, unsigned long long n) {
    using Vec = CastVector<S, D>;
    const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long done = 0;
    // Vectorized bulk when both sides are aligned for it (pool blocks are; offset views may not
    // be).
    if (reinterpret_cast<unsigned long long>(in) % 16 == 0 &&
        reinterpret_cast<unsigned long long>(out) % Vec::kOutAlign == 0) {
        const unsigned long long vectors = n / Vec::V;
        const typename Vec::In* vin = reinterpret_cast<const typename Vec::In*>(in);
        typename Vec::Out* vout = reinterpret_cast<typename Vec::Out*>(out);
        for (unsigned long long i = first; i < vectors; i += step) {
            const typename Vec::In s = vin[i];
            typename Vec::Out d;
#pragma unroll
            for (int k = 0; k < Vec::V; ++k) d.v[k] = convert<S, D>(s.v[k]);
            vout[i] = d;
        }
        done = vectors * Vec::V;
    }
    for (unsigned long long i = done + first; i < n; i += step) out[i] = convert<S, D>(in[i]);
}

#define PGK_CAST(sn, st, dn, dt)                                                               \
    extern "C" __global__ void cast_##sn##_##dn(const st* in, dt* out, unsigned long long n) { \
        cast_impl<st, dt>(in, out, n);                                                         \
    }

#define PGK_CAST_FROM(sn, st)             \
    PGK_CAST(sn, st, f64, double)         \
    PGK_CAST(sn, st, f32, float)          \
    PGK_CAST(sn, st, f16, __half)         \
    PGK_CAST(sn, st, bf16, __nv_bfloat16) \
    PGK_CAST(sn, st, i8, signed char)     \
    PGK_CAST(sn, st, i16, short)          \
    PGK_CAST(sn, st, i32, int)            \
    PGK_CAST(sn, st, i64, long long)      \
    PGK_CAST(sn, st, u8, unsigned char)   \
    PGK_CAST(sn, st, b1, bool)

PGK_CAST_FROM(f64, double)
PGK_CAST_FROM(f32, float)
PGK_CAST_FROM(f16, __half)
PGK_CAST_FROM(bf16, __nv_bfloat16)
PGK_CAST_FROM(i8, signed char)
PGK_CAST_FROM(i16, short)
PGK_CAST_FROM(i32, int)
PGK_CAST_FROM(i64, long long)
PGK_CAST_FROM(u8, unsigned char)
PGK_CAST_FROM(b1, bool)
