#include "ops/scalar.hpp"

#include <cstring>
#include <string>

namespace py = pybind11;

namespace pgk {

namespace {

[[noreturn]] void bad_scalar(py::handle value, const char* expected, const char* what) {
    throw py::type_error(std::string(what) + ": expected " + expected + ", got " +
                         std::string(py::str(py::type::handle_of(value).attr("__name__"))));
}

// An integer from int, bool or a NumPy integer (anything with __index__); floats are refused.
long long as_integer(py::handle value, const char* what) {
    if (!PyIndex_Check(value.ptr())) bad_scalar(value, "an integer", what);
    PyObject* index = PyNumber_Index(value.ptr());
    if (index == nullptr) throw py::error_already_set();
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (overflow > 0) {  // above int64: maybe a valid uint64
        v = static_cast<long long>(PyLong_AsUnsignedLongLong(index));
    }
    Py_DECREF(index);
    if (PyErr_Occurred()) throw py::error_already_set();
    return v;
}

double as_floating(py::handle value, const char* what) {
    double v = PyFloat_AsDouble(value.ptr());  // float, int, NumPy scalars (__float__)
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        bad_scalar(value, "a number", what);
    }
    return v;
}

}  // namespace

uint64_t scalar_bits(py::handle value, ScalarKind kind, int size, const char* what) {
    switch (kind) {
        case ScalarKind::boolean: {
            int truth = PyObject_IsTrue(value.ptr());
            if (truth < 0) throw py::error_already_set();
            return truth ? 1u : 0u;
        }
        case ScalarKind::signed_int:
        case ScalarKind::unsigned_int: {
            const uint64_t v = static_cast<uint64_t>(as_integer(value, what));
            return size == 8 ? v : (v & ((1ULL << (8 * size)) - 1));
        }
        case ScalarKind::half:
            return float_to_half_bits(static_cast<float>(as_floating(value, what)));
        case ScalarKind::bfloat16:
            return float_to_bfloat16_bits(static_cast<float>(as_floating(value, what)));
        case ScalarKind::floating: {
            const double d = as_floating(value, what);
            if (size == 4) {
                const float f = static_cast<float>(d);
                uint32_t bits;
                std::memcpy(&bits, &f, 4);
                return bits;
            }
            uint64_t bits;
            std::memcpy(&bits, &d, 8);
            return bits;
        }
    }
    return 0;
}

uint64_t scalar_bits(py::handle value, DType dtype, const char* what) {
    switch (dtype) {
        case DType::f64:
        case DType::f32:
            return scalar_bits(value, ScalarKind::floating, itemsize(dtype), what);
        case DType::f16:
            return scalar_bits(value, ScalarKind::half, 2, what);
        case DType::bf16:
            return scalar_bits(value, ScalarKind::bfloat16, 2, what);
        case DType::b1:
            return scalar_bits(value, ScalarKind::boolean, 1, what);
        default: {
            // Integer arrays take any real number; non-integers truncate, as NumPy's fill does.
            const int size = itemsize(dtype);
            if (!PyIndex_Check(value.ptr())) {
                const uint64_t u =
                    static_cast<uint64_t>(static_cast<long long>(as_floating(value, what)));
                return size == 8 ? u : (u & ((1ULL << (8 * size)) - 1));
            }
            return scalar_bits(
                value, dtype == DType::u8 ? ScalarKind::unsigned_int : ScalarKind::signed_int, size,
                what);
        }
    }
}

}  // namespace pgk
