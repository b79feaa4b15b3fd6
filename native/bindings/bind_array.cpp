// Array and its creation / copy / fill / cast functions; built-in kernel location.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings/bindings.hpp"
#include "core/array.hpp"
#include "core/device.hpp"
#include "core/residency.hpp"
#include "core/rust_api.hpp"
#include "jit/builtin.hpp"
#include "ops/cast.hpp"
#include "ops/copy.hpp"
#include "ops/fill.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

DType dtype_arg(const std::string& name) {
    try {
        return parse_dtype(name);
    } catch (const std::invalid_argument& e) {
        throw py::type_error(e.what());
    }
}

// The stream argument convention: a Stream, or None for the current stream of `device`.
StreamPtr stream_for(const StreamPtr& stream, int device) {
    if (!stream) return current_stream(device);
    if (stream->device() != device) {
        throw std::invalid_argument("the stream is on device " + std::to_string(stream->device()) +
                                    ", the array on device " + std::to_string(device));
    }
    return stream;
}

py::tuple to_tuple(const Dims& dims) {
    py::tuple t(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) t[i] = py::int_(dims[i]);
    return t;
}

// ---- empty(shape, dtype, device, stream, evictable): the allocation hot path -------------------
// gp.empty + drop is a benchmark against PyTorch's caching allocator (~2.4 us on an H200), so this
// is a raw METH_FASTCALL function instead of the pybind11 Array.empty: no dispatcher, no argument
// loaders, no std::vector/std::string conversions (~0.5-1 us saved), and the current device taken
// here instead of a Python get_device() round trip (~0.2 us).

// The dtype from its name: a pointer compare with the interned names first (Python passes the
// literals of dtypes.NAMES, which are interned), a string compare otherwise.
bool dtype_from_str(PyObject* name, DType* out) {
    static PyObject* interned[kNumDTypes] = {};
    if (interned[0] == nullptr) {
        for (int i = 0; i < kNumDTypes; ++i) {
            interned[i] = PyUnicode_InternFromString(dtype_name(static_cast<DType>(i)));
            if (interned[i] == nullptr) return false;
        }
    }
    for (int i = 0; i < kNumDTypes; ++i) {
        if (name == interned[i]) {
            *out = static_cast<DType>(i);
            return true;
        }
    }
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "dtype must be a str, got %.200s", Py_TYPE(name)->tp_name);
        return false;
    }
    const char* utf8 = PyUnicode_AsUTF8(name);
    if (utf8 == nullptr) return false;
    try {
        *out = parse_dtype(utf8);
    } catch (const std::invalid_argument& e) {
        PyErr_SetString(PyExc_TypeError, e.what());
        return false;
    }
    return true;
}

// A tuple (or list) of ints as Dims; negative sizes are left to Array::checked_size (ValueError).
bool dims_from(PyObject* shape, Dims* out) {
    PyObject* seq = PySequence_Fast(shape, "shape must be a tuple of ints");
    if (seq == nullptr) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject** items = PySequence_Fast_ITEMS(seq);
    out->resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        const long long v = PyLong_AsLongLong(items[i]);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return false;
        }
        (*out)[static_cast<size_t>(i)] = v;
    }
    Py_DECREF(seq);
    return true;
}

PyObject* empty_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError,
                        "empty(shape, dtype, device=None, stream=None, evictable=False) takes 2 to "
                        "5 positional arguments");
        return nullptr;
    }
    Dims shape;
    DType dtype;
    if (!dims_from(args[0], &shape) || !dtype_from_str(args[1], &dtype)) return nullptr;
    int device = -1;
    if (nargs > 2 && args[2] != Py_None) {
        const long d = PyLong_AsLong(args[2]);
        if (d == -1 && PyErr_Occurred()) return nullptr;
        device = static_cast<int>(d);
    }
    bool evictable = false;
    if (nargs > 4) {
        const int truth = PyObject_IsTrue(args[4]);
        if (truth < 0) return nullptr;
        evictable = truth != 0;
    }
    try {
        if (device < 0) device = get_device();
        StreamPtr stream;
        if (nargs > 3 && args[3] != Py_None) stream = py::cast<StreamPtr>(py::handle(args[3]));
        return py::cast(Array::empty(shape, dtype, stream_for(stream, device), evictable))
            .release()
            .ptr();
    } catch (py::error_already_set& e) {
        e.restore();
        return nullptr;
    } catch (...) {
        py::detail::try_translate_exceptions();
        return nullptr;
    }
}

PyMethodDef kEmptyMethod[] = {
    {"empty", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&empty_fast)),
     METH_FASTCALL,
     "empty(shape, dtype, device=None, stream=None, evictable=False) -> Array: positional only; "
     "shape a tuple of ints, dtype a NumPy name, device None for the current one."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void bind_array(py::module_& m) {
    py::class_<Array>(m, "Array")
        .def_static(
            "empty",
            [](const Dims& shape, const std::string& dtype, int device, StreamPtr stream,
               bool evictable) {
                const DType t = dtype_arg(dtype);
                return Array::empty(shape, t, stream_for(stream, device), evictable);
            },
            py::arg("shape"), py::arg("dtype"), py::arg("device") = 0, py::arg("stream") = nullptr,
            py::arg("evictable") = false)
        .def_property_readonly("shape", [](const Array& a) { return to_tuple(a.shape()); })
        .def_property_readonly("strides", [](const Array& a) { return to_tuple(a.strides()); })
        .def_property_readonly("dtype", [](const Array& a) { return dtype_name(a.dtype()); })
        .def_property_readonly("itemsize", &Array::itemsize)
        .def_property_readonly("size", &Array::size)
        .def_property_readonly("nbytes", &Array::nbytes)
        .def_property_readonly("ndim", &Array::ndim)
        .def_property_readonly("device", &Array::device)
        .def_property_readonly("data_ptr",
                               [](const Array& a) {
                                   // An evictable array is restored on the current stream first;
                                   // the address is valid until the pool next needs room.
                                   if (a.buffer()->evictable()) {
                                       make_resident(current_stream(a.device()), {&a});
                                   }
                                   return a.data_ptr();
                               })
        .def_property_readonly("evictable", [](const Array& a) { return a.buffer()->evictable(); })
        .def_property_readonly("offset", &Array::offset)
        .def_property_readonly("buffer_nbytes", [](const Array& a) { return a.buffer()->nbytes(); })
        .def_property_readonly("is_c_contiguous", &Array::is_c_contiguous)
        .def_property_readonly("stream", [](const Array& a) { return a.buffer()->last_stream(); })
        .def("view", &Array::view, py::arg("shape"), py::arg("strides"), py::arg("offset"))
        .def(
            "view_dtype",
            [](const Array& a, const std::string& dtype) { return a.view_dtype(dtype_arg(dtype)); },
            py::arg("dtype"))
        .def(
            "copy_from_host",
            [](const Array& a, py::array host, StreamPtr stream, bool blocking) {
                copy_from_host(a, host, stream_for(stream, a.device()), blocking);
            },
            py::arg("host"), py::arg("stream") = nullptr, py::arg("blocking") = true)
        .def(
            "copy_to_host",
            [](const Array& a, py::array host, StreamPtr stream) {
                copy_to_host(a, host, stream_for(stream, a.device()));
            },
            py::arg("host"), py::arg("stream") = nullptr)
        .def(
            "download",
            [](const Array& a, py::array host, StreamPtr stream) {
                return std::make_unique<HostDownload>(a, host, stream_for(stream, a.device()));
            },
            py::arg("host"), py::arg("stream") = nullptr,
            "Start copying into `host` (C-contiguous, writeable): ordered after the work on "
            "`stream` so far; HostDownload.run() (any thread, GIL released) finishes it.")
        .def(
            "copy_from",
            [](const Array& dst, const Array& src, StreamPtr stream) {
                copy_device(dst, src, stream_for(stream, dst.device()));
            },
            py::arg("src"), py::arg("stream") = nullptr)
        .def(
            "contiguous",
            [](const Array& a, StreamPtr stream) {
                return contiguous(a, stream_for(stream, a.device()));
            },
            py::arg("stream") = nullptr)
        .def(
            "fill",
            [](const Array& a, py::handle value, StreamPtr stream) {
                fill(a, value, stream_for(stream, a.device()));
            },
            py::arg("value"), py::arg("stream") = nullptr)
        .def(
            "astype",
            [](const Array& a, const std::string& dtype, StreamPtr stream) {
                return astype(a, dtype_arg(dtype), stream_for(stream, a.device()));
            },
            py::arg("dtype"), py::arg("stream") = nullptr)
        .def("__repr__", [](const Array& a) {
            std::string shape = py::str(to_tuple(a.shape()));
            return "<_native.Array shape=" + shape + " dtype=" + dtype_name(a.dtype()) +
                   " device=" + std::to_string(a.device()) + ">";
        });

    py::class_<HostDownload>(m, "HostDownload")
        .def("run", &HostDownload::run, py::call_guard<py::gil_scoped_release>(),
             "Copy through the transfer engine; returns once the bytes are in the host array.")
        .def_property_readonly("host", &HostDownload::host);

    m.def(
        "arange",
        [](py::handle start, py::handle step, int64_t n, const std::string& dtype, int device,
           StreamPtr stream) {
            const DType t = dtype_arg(dtype);
            return arange(start, step, n, t, stream_for(stream, device));
        },
        py::arg("start"), py::arg("step"), py::arg("n"), py::arg("dtype"), py::arg("device") = 0,
        py::arg("stream") = nullptr);

    m.def(
        "set_kernel_dir",
        [](const std::string& path, const std::string& manifest_json,
           const std::vector<std::string>& include_dirs,
           const std::vector<std::string>& nvrtc_candidates) {
            // The caller (backend/cuda.py) has checked the manifest's kernel ABI.
            py::dict manifest = py::module_::import("json").attr("loads")(manifest_json);
            set_kernel_dir(path, manifest["options"].cast<std::vector<std::string>>(), include_dirs,
                           nvrtc_candidates);
        },
        py::arg("path"), py::arg("manifest_json"), py::arg("include_dirs"),
        py::arg("nvrtc_candidates") = std::vector<std::string>{},
        "Where the built-in kernels are (pygpukit/_kernels) and the manifest written with them; "
        "NVRTC is loaded from nvrtc_candidates only if a kernel must be JIT-compiled.");
    m.def(
        "connect_pool", [] { rust_api(); },
        "Import pygpukit._rust's C API and register the CUDA backend with it (otherwise done by "
        "the first allocation), so the device pools exist.");
    PyObject* empty = PyCFunction_NewEx(kEmptyMethod, nullptr, m.attr("__name__").ptr());
    if (empty == nullptr) throw py::error_already_set();
    m.add_object("empty", py::reinterpret_steal<py::object>(empty));
    m.def("choose_cubin_arch", &choose_cubin_arch, py::arg("major"), py::arg("minor"),
          py::arg("available"));
}

}  // namespace pgk
