// C++ exceptions -> pygpukit.errors classes (registered from Python by _set_error_types; plain
// RuntimeError / MemoryError before that).
#include <pybind11/pybind11.h>

#include "bindings/bindings.hpp"
#include "core/errors.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

// Owned references kept for the life of the process (never released: exception classes must
// outlive every translator call, including at interpreter shutdown).
PyObject* g_cuda_error = nullptr;
PyObject* g_compile_error = nullptr;
PyObject* g_oom_error = nullptr;

void raise_instance(PyObject* cls, const py::tuple& args, PyObject* fallback, const char* text) {
    if (cls == nullptr) {
        PyErr_SetString(fallback, text);
        return;
    }
    PyObject* exc = PyObject_Call(cls, args.ptr(), nullptr);
    if (exc == nullptr) return;  // constructing the exception raised: that error propagates
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
}

// (in_use, limit) of the Rust pool for an OutOfMemoryError; (0, None) when unavailable.
std::pair<py::object, py::object> pool_usage() {
    try {
        py::dict stats = py::module_::import("pygpukit._rust").attr("pool_stats")();
        py::object in_use = stats.contains("in_use") ? stats["in_use"] : py::int_(0);
        py::object limit = stats.contains("limit") ? stats["limit"] : py::none();
        return {in_use, limit};
    } catch (const py::error_already_set&) {
        return {py::int_(0), py::none()};
    }
}

}  // namespace

void bind_errors(py::module_& m) {
    m.def(
        "_set_error_types",
        [](py::module_ errors) {
            g_cuda_error = py::object(errors.attr("CudaError")).release().ptr();
            g_compile_error = py::object(errors.attr("CompileError")).release().ptr();
            g_oom_error = py::object(errors.attr("OutOfMemoryError")).release().ptr();
        },
        "Register pygpukit.errors' CudaError, CompileError and OutOfMemoryError.");

    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const CudaError& e) {
            raise_instance(g_cuda_error, py::make_tuple(e.code(), e.name(), e.message()),
                           PyExc_RuntimeError, e.what());
        } catch (const CompileError& e) {
            raise_instance(g_compile_error, py::make_tuple(e.log()), PyExc_RuntimeError, e.what());
        } catch (const OutOfMemoryError& e) {
            auto [in_use, limit] = pool_usage();
            raise_instance(g_oom_error, py::make_tuple(e.requested(), in_use, limit, py::none()),
                           PyExc_MemoryError, e.what());
        } catch (const MissingComponentError& e) {
            PyErr_SetString(PyExc_ImportError, e.what());
        }
    });
}

}  // namespace pgk
