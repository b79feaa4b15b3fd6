// Entry points and exported constants of package kernels (see docs/kernels.md, "Kernels in a
// package"). A kernel file declares each `extern "C"` entry point through PGK_KERNEL, which
// also records the entry point's argument type codes in the cubin, and exports the integer
// constants its host code needs through PGK_CONSTANT. The build (`python -m
// pygpukit.kernels.build`) reads both back from the compiled cubin into the package's
// manifest.json, so the loader never parses C++ source. The house style: a family declares its
// parameter list once in a macro and its instantiations once, as a list:
//
//     #define PGK_SCALE(sfx, T) \
//         PGK_KERNEL(scale_##sfx, (T* x, T factor, int n)) { scale_impl<T>(x, factor, n); }
//     PGK_FLOAT_TYPES(PGK_SCALE)       // scale_f32, scale_f16, scale_bf16
//     PGK_CONSTANT(SCALE_BLOCK, 256);
//
// The records are a few bytes of `__device__` data beside the kernels; the kernels' code is
// the same as without them.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// The TMA descriptor a `const __grid_constant__ CUtensorMap` parameter receives (gp.TensorMap
// on the host): cuda.h's type where it is included, else its layout (128 opaque bytes, 64-byte
// aligned), as NVRTC sources have no cuda.h.
#ifndef CUDA_VERSION
struct alignas(64) CUtensorMap {
    unsigned long long opaque[16];
};
#endif

namespace pgk_kernel {

// The one-character type code of a kernel parameter type, as pygpukit.kernels names them:
// p ptr, b i8, B u8, h i16, H u16, i i32, I u32, q i64, Q u64, e f16, E bf16, f f32, d f64,
// ? bool, t tmap. A parameter type without a code fails to compile here.
template <typename T>
struct ArgCode;
template <typename T>
struct ArgCode<T*> {
    enum : char { value = 'p' };
};
template <typename T>
struct ArgCode<const T> : ArgCode<T> {};
template <typename T>
struct ArgCode<volatile T> : ArgCode<T> {};

#define PGK_ARG_CODE_(type, code)     \
    template <>                       \
    struct ArgCode<type> {            \
        enum : char { value = code }; \
    };
PGK_ARG_CODE_(signed char, 'b')
PGK_ARG_CODE_(char, 'b')
PGK_ARG_CODE_(unsigned char, 'B')
PGK_ARG_CODE_(short, 'h')
PGK_ARG_CODE_(unsigned short, 'H')
PGK_ARG_CODE_(int, 'i')
PGK_ARG_CODE_(unsigned int, 'I')
PGK_ARG_CODE_(long, 'q')
PGK_ARG_CODE_(unsigned long, 'Q')
PGK_ARG_CODE_(long long, 'q')
PGK_ARG_CODE_(unsigned long long, 'Q')
PGK_ARG_CODE_(__half, 'e')
PGK_ARG_CODE_(__nv_bfloat16, 'E')
PGK_ARG_CODE_(float, 'f')
PGK_ARG_CODE_(double, 'd')
PGK_ARG_CODE_(bool, '?')
PGK_ARG_CODE_(CUtensorMap, 't')
#undef PGK_ARG_CODE_

// The record PGK_KERNEL leaves in the cubin: one code per parameter, then a NUL. Beside it,
// `pgk_params_<name>` holds the parameter list as written, for the parameter names only.
template <typename F>
struct Signature;
template <typename... A>
struct Signature<void(A...)> {
    char codes[sizeof...(A) + 1] = {ArgCode<A>::value..., '\0'};
};

}  // namespace pgk_kernel

// An `extern "C"` kernel `name` with the parameter list `params` (in parentheses); the body
// follows. Use the _BOUNDS form for `__launch_bounds__(max_threads[, min_blocks])`.
#define PGK_KERNEL(name, params) PGK_KERNEL_WITH_(name, params, )
#define PGK_KERNEL_BOUNDS(name, params, ...) \
    PGK_KERNEL_WITH_(name, params, __launch_bounds__(__VA_ARGS__))
#define PGK_KERNEL_WITH_(name, params, attributes)                                             \
    extern "C" __global__ void attributes name params;                                         \
    extern "C" __device__ const ::pgk_kernel::Signature<decltype(name)> pgk_entry_##name = {}; \
    extern "C" __device__ const char pgk_params_##name[] = #params;                            \
    extern "C" __global__ void attributes name params

// The floating dtypes most families instantiate, as X(suffix, type): entry points are named
// `<family>_<suffix>` (`rmsnorm_bf16`), the suffixes pygpukit.ops uses for dtypes.
#define PGK_FLOAT_TYPES(X) X(f32, float) X(f16, __half) X(bf16, __nv_bfloat16)
// The 16-bit ones (tensor-core kernels).
#define PGK_HALF_TYPES(X) X(f16, __half) X(bf16, __nv_bfloat16)

// An integer constant of this kernel file that host code reads from the manifest
// (`KernelLibrary.constant(file, "NAME")`), so a tile size or limit is written once, here.
#define PGK_CONSTANT(name, value) \
    extern "C" __device__ constexpr long long pgk_constant_##name = (value)
