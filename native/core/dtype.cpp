#include "core/dtype.hpp"

#include <cstring>
#include <stdexcept>

namespace pgk {

namespace {

struct DTypeInfo {
    const char* name;
    const char* suffix;
    int itemsize;
    bool floating;
};

constexpr DTypeInfo kInfo[kNumDTypes] = {
    {"float64", "f64", 8, true},   {"float32", "f32", 4, true}, {"float16", "f16", 2, true},
    {"bfloat16", "bf16", 2, true}, {"int8", "i8", 1, false},    {"int16", "i16", 2, false},
    {"int32", "i32", 4, false},    {"int64", "i64", 8, false},  {"uint8", "u8", 1, false},
    {"bool", "b1", 1, false},
};

const DTypeInfo& info(DType t) { return kInfo[static_cast<int>(t)]; }

}  // namespace

int itemsize(DType t) { return info(t).itemsize; }
const char* dtype_name(DType t) { return info(t).name; }
const char* kernel_suffix(DType t) { return info(t).suffix; }
bool is_floating(DType t) { return info(t).floating; }

DType parse_dtype(const std::string& name) {
    for (int i = 0; i < kNumDTypes; ++i) {
        if (name == kInfo[i].name) return static_cast<DType>(i);
    }
    throw std::invalid_argument("unsupported dtype '" + name +
                                "' (float64 float32 float16 bfloat16 int8 int16 int32 int64 "
                                "uint8 bool)");
}

uint16_t float_to_half_bits(float value) {
    uint32_t x;
    std::memcpy(&x, &value, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or nan
        return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (abs < 0x38800000u) {  // subnormal half (or zero)
        if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
        const uint32_t exp = abs >> 23;
        const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - exp;  // 14..24
        uint32_t half = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) ++half;
        return static_cast<uint16_t>(sign | half);
    }
    uint32_t half = ((abs - 0x38000000u) >> 13);
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
}

uint16_t float_to_bfloat16_bits(float value) {
    uint32_t x;
    std::memcpy(&x, &value, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

}  // namespace pgk
