// The element types of an Array, named as NumPy names them (bfloat16 as ml_dtypes does).
#pragma once

#include <cstdint>
#include <string>

namespace pgk {

enum class DType : uint8_t { f64, f32, f16, bf16, i8, i16, i32, i64, u8, b1 };
constexpr int kNumDTypes = 10;

int itemsize(DType t);
const char* dtype_name(DType t);     // "float32", "bfloat16", "bool", ...
const char* kernel_suffix(DType t);  // "f32", "bf16", "b1", ...: the {op}_{suffix} kernel names
bool is_floating(DType t);
// Parse a NumPy dtype name; throws std::invalid_argument (TypeError in the bindings) otherwise.
DType parse_dtype(const std::string& name);

// IEEE half / bfloat16 bit patterns of a float, rounded to nearest even (for scalars sent to
// kernels; the device does all array conversions).
uint16_t float_to_half_bits(float value);
uint16_t float_to_bfloat16_bits(float value);

}  // namespace pgk
