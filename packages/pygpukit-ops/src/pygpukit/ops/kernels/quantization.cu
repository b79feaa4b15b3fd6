// GGUF (ggml) tensor types to float32 / float16 / bfloat16 (host side: ops/quantization.py).
//
//   dequantize_<type>_<dtype>   out[i] = value i of the raw ggml tensor bytes, for i < n, one
//                               element per thread (grid-stride); <type> is one of
//                               f32, f16, bf16 (a cast) and the 32-element block formats:
//     q8_0   34 bytes: fp16 scale d, 32 int8 q;             x = q * d
//     q4_0   18 bytes: fp16 scale d, 16 bytes of nibbles;   x = (q - 8) * d
//     q4_1   20 bytes: fp16 scale d, fp16 min m, nibbles;   x = q * d + m
//   In the 4-bit formats byte j of the nibbles holds element j (low nibble) and element j + 16
//   (high nibble). Products and sums are rounded separately (no fused multiply-add), so the
//   float32 result is bit-identical to the NumPy reference; one rounding to the output dtype.
#include "layers.cuh"
#include "pygpukit/kernel.cuh"

using namespace pgk_layers;

enum class Type { F32, F16, BF16, Q8_0, Q4_0, Q4_1 };

// Block starts are multiples of 18, 20 or 34 bytes from a 4-byte aligned tensor: the fp16
// fields are 2-byte aligned.
__device__ __forceinline__ float half_at(const unsigned char* p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

__device__ __forceinline__ int nibble(const unsigned char* qs, int j) {
    return j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
}

template <Type TYPE>
__device__ __forceinline__ float element(const unsigned char* __restrict__ raw, long long i) {
    if constexpr (TYPE == Type::F32) {
        return reinterpret_cast<const float*>(raw)[i];
    } else if constexpr (TYPE == Type::F16) {
        return __half2float(reinterpret_cast<const __half*>(raw)[i]);
    } else if constexpr (TYPE == Type::BF16) {
        return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(raw)[i]);
    } else {
        const long long b = i / 32;
        const int j = static_cast<int>(i - b * 32);
        if constexpr (TYPE == Type::Q8_0) {
            const unsigned char* blk = raw + b * 34;
            const float q = static_cast<float>(static_cast<signed char>(blk[2 + j]));
            return __fmul_rn(q, half_at(blk));
        } else if constexpr (TYPE == Type::Q4_0) {
            const unsigned char* blk = raw + b * 18;
            return __fmul_rn(static_cast<float>(nibble(blk + 2, j) - 8), half_at(blk));
        } else {
            const unsigned char* blk = raw + b * 20;
            const float q = static_cast<float>(nibble(blk + 4, j));
            return __fadd_rn(__fmul_rn(q, half_at(blk)), half_at(blk + 2));
        }
    }
}

template <Type TYPE, typename T>
__device__ __forceinline__ void dequantize(const unsigned char* __restrict__ raw,
                                           T* __restrict__ out, long long n) {
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        out[i] = narrow<T>(element<TYPE>(raw, i));
    }
}

// Entry points dequantize_<type>_<dtype>, for every ggml type and output dtype.
#define PGK_DEQUANTIZE_TO(type, TYPE, sfx, T)                                                \
    PGK_KERNEL(dequantize_##type##_##sfx, (const unsigned char* raw, T* out, long long n)) { \
        dequantize<Type::TYPE, T>(raw, out, n);                                              \
    }
#define PGK_DEQUANTIZE(type, TYPE)            \
    PGK_DEQUANTIZE_TO(type, TYPE, f32, float) \
    PGK_DEQUANTIZE_TO(type, TYPE, f16, __half) PGK_DEQUANTIZE_TO(type, TYPE, bf16, __nv_bfloat16)
PGK_DEQUANTIZE(f32, F32)
PGK_DEQUANTIZE(f16, F16)
PGK_DEQUANTIZE(bf16, BF16)
PGK_DEQUANTIZE(q8_0, Q8_0)
PGK_DEQUANTIZE(q4_0, Q4_0)
PGK_DEQUANTIZE(q4_1, Q4_1)
