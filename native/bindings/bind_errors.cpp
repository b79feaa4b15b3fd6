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

// The OutOfMemoryError arguments of this thread's last refused allocation, as the Rust pool
// recorded it (requested, in_use, limit, partition, limit_exceeded); `requested` alone when
// unavailable.
py::tuple oom_arguments(uint64_t requested) {
    try {
        py::object last = py::module_::import("pygpukit._rust").attr("last_alloc_error")();
        if (!last.is_none()) {
            return py::make_tuple(last["requested"], last["in_use"], last["limit"],
                                  last["partition"], last["limit_exceeded"]);
        }
    } catch (const py::error_already_set&) {
    }
    return py::make_tuple(requested, 0, py::none(), py::none());
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
            raise_instance(g_oom_error, oom_arguments(e.requested()), PyExc_MemoryError, e.what());
        } catch (const MissingComponentError& e) {
            PyErr_SetString(PyExc_ImportError, e.what());
        }
    });
}

}  // namespace pgk
