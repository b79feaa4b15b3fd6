#include "jit/kernel_args.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/array.hpp"
#include "core/residency.hpp"
#include "jit/tensor_map.hpp"
#include "ops/scalar.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

constexpr size_t kInlineParams = 16;  // packed on the stack up to this many parameters

// The Array behind a kernel argument: an Array, or an object whose `_impl` is one (GPUArray).
const Array* as_array(py::handle obj) {
    if (py::isinstance<Array>(obj)) return &obj.cast<const Array&>();
    if (PyObject_HasAttrString(obj.ptr(), "_impl")) {
        py::object impl = obj.attr("_impl");
        if (py::isinstance<Array>(impl)) return &impl.cast<const Array&>();
    }
    return nullptr;
}

std::string describe(const Function& f, size_t index, ArgCode code) {
    return "kernel '" + f.name() + "' parameter " + std::to_string(index) + " (" +
           kArgCodeNames[static_cast<int>(code)] + ")";
}

// The value of one argument in the low bytes of a 64-bit slot. Error messages are built only on
// the error path: nothing is allocated per argument on a good launch.
// `evictable` receives the argument's Array when its buffer is evictable (its address is then
// read again after make_resident).
uint64_t pack_value(py::handle obj, ArgCode code, size_t index, const Function& f,
                    const StreamPtr& stream, const Array*& evictable) {
    switch (code) {
        case ArgCode::ptr: {
            if (const Array* a = as_array(obj)) {
                if (a->device() != f.device()) {
                    throw std::invalid_argument(describe(f, index, code) + ": array on device " +
                                                std::to_string(a->device()) +
                                                ", kernel loaded on device " +
                                                std::to_string(f.device()));
                }
                a->buffer()->used_on(stream);
                if (a->buffer()->evictable()) {
                    evictable = a;
                    return 0;  // its address is known after make_resident
                }
                return a->data_ptr();
            }
            if (PyLong_Check(obj.ptr()) && !PyBool_Check(obj.ptr())) {
                return PyLong_AsUnsignedLongLongMask(obj.ptr());  // a raw device address
            }
            throw py::type_error(": expected a GPUArray or an int address, got " +
                                 std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
        }
        case ArgCode::i8:
        case ArgCode::i16:
        case ArgCode::i32:
        case ArgCode::i64:
            return scalar_bits(obj, ScalarKind::signed_int, arg_code_size(code), "");
        case ArgCode::u8:
        case ArgCode::u16:
        case ArgCode::u32:
        case ArgCode::u64:
            return scalar_bits(obj, ScalarKind::unsigned_int, arg_code_size(code), "");
        case ArgCode::f16:
            return scalar_bits(obj, ScalarKind::half, 2, "");
        case ArgCode::bf16:
            return scalar_bits(obj, ScalarKind::bfloat16, 2, "");
        case ArgCode::f32:
        case ArgCode::f64:
            return scalar_bits(obj, ScalarKind::floating, arg_code_size(code), "");
        case ArgCode::b1:
            return scalar_bits(obj, ScalarKind::boolean, 1, "");
        case ArgCode::tmap:
            break;  // passed by address: tensor_map_arg
    }
    return 0;
}

// The CUtensorMap behind a tmap argument (a TensorMap, or an object whose `_impl` is one); its
// array is marked used on the launch stream like a pointer argument's.
const CUtensorMap* tensor_map_arg(py::handle obj, size_t index, const Function& f,
                                  const StreamPtr& stream) {
    py::handle impl = obj;
    if (!py::isinstance<TensorMap>(impl) && PyObject_HasAttrString(obj.ptr(), "_impl")) {
        impl = obj.attr("_impl");
    }
    if (!py::isinstance<TensorMap>(impl)) {
        throw py::type_error(describe(f, index, ArgCode::tmap) + ": expected a gp.TensorMap, got " +
                             std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    }
    const TensorMap& tm = impl.cast<const TensorMap&>();
    if (tm.device() != f.device()) {
        throw std::invalid_argument(describe(f, index, ArgCode::tmap) +
                                    ": map of an array on "
                                    "device " +
                                    std::to_string(tm.device()) + ", kernel loaded on device " +
                                    std::to_string(f.device()));
    }
    tm.buffer()->used_on(stream);
    return &tm.map();
}

uint64_t pack_one(py::handle obj, ArgCode code, size_t index, const Function& f,
                  const StreamPtr& stream, const Array*& evictable) {
    try {
        return pack_value(obj, code, index, f, stream, evictable);
    } catch (const py::type_error& e) {
        throw py::type_error(describe(f, index, code) + e.what());
    }
}

}  // namespace

void parse_dim3(py::handle value, unsigned out[3], const char* what) {
    out[0] = out[1] = out[2] = 1;
    auto take = [&](py::handle v, int i) {
        if (!PyIndex_Check(v.ptr())) {
            throw py::type_error(std::string(what) + ": expected ints");
        }
        const long long n = v.cast<long long>();
        if (n <= 0 || n > 0x7fffffffLL) {
            throw std::invalid_argument(std::string(what) + ": dimension " + std::to_string(n) +
                                        " out of range");
        }
        out[i] = static_cast<unsigned>(n);
    };
    if (PyTuple_Check(value.ptr()) || PyList_Check(value.ptr())) {
        py::sequence seq = py::reinterpret_borrow<py::sequence>(value);
        if (seq.size() < 1 || seq.size() > 3) {
            throw std::invalid_argument(std::string(what) + ": expected 1 to 3 dimensions");
        }
        for (size_t i = 0; i < seq.size(); ++i) take(seq[i], static_cast<int>(i));
    } else {
        take(value, 0);
    }
}

void launch_function(const Function& f, const LaunchConfig& config, const StreamPtr& stream,
                     py::tuple args) {
    const std::vector<ArgCode>& signature = f.signature();
    const size_t n = args.size();
    if (n != signature.size()) {
        throw py::type_error("kernel '" + f.name() + "' takes " + std::to_string(signature.size()) +
                             " arguments, got " + std::to_string(n));
    }
    if (stream->device() != f.device()) {
        throw std::invalid_argument("kernel '" + f.name() + "' is loaded on device " +
                                    std::to_string(f.device()) + ", the stream is on device " +
                                    std::to_string(stream->device()));
    }
    // Each value lives in an 8-byte slot; cuLaunchKernel reads the parameter's size from it
    // (little-endian, so the low bytes hold narrower types).
    uint64_t inline_values[kInlineParams];
    void* inline_pointers[kInlineParams];
    std::unique_ptr<uint64_t[]> heap_values;
    std::unique_ptr<void*[]> heap_pointers;
    uint64_t* values = inline_values;
    void** pointers = inline_pointers;
    if (n > kInlineParams) {
        heap_values.reset(new uint64_t[n]);
        heap_pointers.reset(new void*[n]);
        values = heap_values.get();
        pointers = heap_pointers.get();
    }
    // Evictable array arguments, by slot; empty (no allocation) unless the launch has some.
    std::vector<std::pair<size_t, const Array*>> evictable;
    for (size_t i = 0; i < n; ++i) {
        const Array* spillable = nullptr;
        if (signature[i] == ArgCode::tmap) {
            // cuLaunchKernel copies the 128 bytes before returning: the map object outlives it.
            pointers[i] = const_cast<CUtensorMap*>(tensor_map_arg(args[i], i, f, stream));
            continue;
        }
        values[i] = pack_one(args[i], signature[i], i, f, stream, spillable);
        pointers[i] = &values[i];
        if (spillable != nullptr) evictable.emplace_back(i, spillable);
    }
    if (!evictable.empty()) {
        std::vector<const Array*> arrays;
        for (const auto& [slot, a] : evictable) arrays.push_back(a);
        make_resident(stream, arrays);
        for (const auto& [slot, a] : evictable) values[slot] = a->data_ptr();
    }
    launch_kernel(f.handle(), config, *stream, pointers);
}

}  // namespace pgk
