// Conversions between the runtime's dtypes in device code, shared by the runtime kernels (cast,
// elementwise, reduce, scan, softmax).
// Half types are computed in float: Wide<T>::type is the type a value of T is computed in and
// widen() converts to it. To<D>::from(w) narrows a computed value to D with NumPy's rules: bool is
// "!= 0", float -> int truncates, float -> half types rounds to nearest (double -> half types
// directly, so a double is rounded once).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T widen(T x) {
    return x;
}

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
