// Element type conversion between every pair of runtime dtypes (built-in runtime kernel):
// cast_<from>_<to>(const From* in, To* out, n) over contiguous buffers, NumPy's semantics
// (bool -> 0/1, anything -> bool is "!= 0", float -> int truncates).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// Half types are widened to float before converting; everything else converts directly.
template <typename T>
struct Wide {
    using type = T;
};
template <>
struct Wide<__half> {
    using type = float;
};
template <>
struct Wide<__nv_bfloat16> {
    using type = float;
};

template <typename D>
struct To {
    template <typename W>
    __device__ static D from(W w) {
        return static_cast<D>(w);
    }
};
template <>
struct To<bool> {
    template <typename W>
    __device__ static bool from(W w) {
        return w != W(0);
    }
};
template <>
struct To<__half> {
    __device__ static __half from(double w) { return __double2half(w); }
    __device__ static __half from(float w) { return __float2half_rn(w); }
    template <typename W>
    __device__ static __half from(W w) {
        return __float2half_rn(static_cast<float>(w));
    }
};
template <>
struct To<__nv_bfloat16> {
    __device__ static __nv_bfloat16 from(double w) { return __double2bfloat16(w); }
    __device__ static __nv_bfloat16 from(float w) { return __float2bfloat16_rn(w); }
    template <typename W>
    __device__ static __nv_bfloat16 from(W w) {
        return __float2bfloat16_rn(static_cast<float>(w));
    }
};

template <typename S, typename D>
__device__ void cast_impl(const S* in, D* out, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const typename Wide<S>::type w = static_cast<typename Wide<S>::type>(in[i]);
        out[i] = To<D>::from(w);
    }
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
