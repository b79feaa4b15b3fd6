#include "ops/cast.hpp"

#include <array>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/launch.hpp"
#include "core/residency.hpp"
#include "jit/builtin.hpp"
#include "ops/copy.hpp"
#include "ops/scalar.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

const BuiltinKernel& cast_kernel(DType from, DType to) {
    // cast_<from>_<to> for every pair, built once.
    static const auto table = [] {
        std::array<std::unique_ptr<BuiltinKernel>, kNumDTypes * kNumDTypes> t;
        for (int s = 0; s < kNumDTypes; ++s) {
            for (int d = 0; d < kNumDTypes; ++d) {
                t[s * kNumDTypes + d] = std::make_unique<BuiltinKernel>(
                    "cast", std::string("cast_") + kernel_suffix(static_cast<DType>(s)) + "_" +
                                kernel_suffix(static_cast<DType>(d)));
            }
        }
        return t;
    }();
    return *table[static_cast<int>(from) * kNumDTypes + static_cast<int>(to)];
}

}  // namespace

Array astype(const Array& a, DType dtype, const StreamPtr& stream) {
    const Array src = contiguous(a, stream);
    Array out = Array::empty(a.shape(), dtype, stream);
    if (a.size() > 0) {
        if (dtype == a.dtype()) {
            copy_device(out, src, stream);
        } else {
            make_resident(stream, {&src});
            uint64_t in_ptr = src.data_ptr(), out_ptr = out.data_ptr();
            unsigned long long n = static_cast<unsigned long long>(a.size());
            void* args[] = {&in_ptr, &out_ptr, &n};
            launch_kernel(cast_kernel(a.dtype(), dtype).get(stream->device()),
                          launch_config_1d(n, stream->device()), *stream, args);
        }
    }
    a.buffer()->used_on(stream);
    return out;
}

Array arange(py::handle start, py::handle step, int64_t n, DType dtype, const StreamPtr& stream) {
    if (n < 0) throw std::invalid_argument("arange: negative length " + std::to_string(n));
    if (dtype == DType::b1) throw py::type_error("arange: bool arrays have no arange");
    // Check the scalars before allocating anything.
    const bool floating = is_floating(dtype);
    const uint64_t start_bits = scalar_bits(
        start, floating ? ScalarKind::floating : ScalarKind::signed_int, 8, "arange start");
    const uint64_t step_bits = scalar_bits(
        step, floating ? ScalarKind::floating : ScalarKind::signed_int, 8, "arange step");
    Array out = Array::empty({n}, dtype, stream);
    if (n > 0) {
        static const auto table = [] {
            std::array<std::unique_ptr<BuiltinKernel>, kNumDTypes> t;
            for (int d = 0; d < kNumDTypes; ++d) {
                t[d] = std::make_unique<BuiltinKernel>(
                    "arange", std::string("arange_") + kernel_suffix(static_cast<DType>(d)));
            }
            return t;
        }();
        uint64_t out_ptr = out.data_ptr(), a = start_bits, b = step_bits;
        unsigned long long count = static_cast<unsigned long long>(n);
        void* args[] = {&out_ptr, &a, &b, &count};
        launch_kernel(table[static_cast<int>(dtype)]->get(stream->device()),
                      launch_config_1d(count, stream->device()), *stream, args);
    }
    return out;
}

}  // namespace pgk
