// matmul and the cuBLASLt loader.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/bindings.hpp"
#include "core/cublaslt.hpp"
#include "ops/matmul.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

GemmBackend backend_arg(const std::string& name) {
    if (name == "auto" || name.empty()) return GemmBackend::automatic;
    if (name == "own") return GemmBackend::own;
    if (name == "cublaslt") return GemmBackend::cublaslt;
    throw std::invalid_argument("matmul backend must be 'auto', 'own' or 'cublaslt', got '" + name +
                                "'");
}

// `x` as the one-batch 3-D operand the native matmul takes: a view, never a copy. A 2-D (r, c)
// array keeps its strides; its batch stride is 0 (one batch, never stepped over).
Array one_batch(const Array& x, int64_t rows, int64_t cols, int64_t srow, int64_t scol) {
    return x.view(Dims{1, rows, cols}, Dims{0, srow, scol}, x.offset());
}

// A C-contiguous `out` as the (1, m, n) C-contiguous result the native matmul writes.
Array c_order(const Array& out, int64_t m, int64_t n, int item) {
    return out.view(Dims{1, m, n}, Dims{m * n * item, n * item, item}, out.offset());
}

// a @ b for two 2-D arrays, or two 3-D arrays of one batch size, into a new C-contiguous array:
// the whole call in C++ (the views, the allocation, the product), for small problems whose
// cost is the host's.
Array matmul_new(const Array& a, const Array& b, bool allow_tf32, GemmBackend backend) {
    const int nd = a.ndim();
    if (nd != b.ndim() || (nd != 2 && nd != 3)) {
        throw std::invalid_argument("matmul_new takes two 2-D or two 3-D arrays");
    }
    const Dims& sa = a.shape();
    const Dims& sb = b.shape();
    const int64_t batch = nd == 3 ? sa[0] : 1;
    const int64_t m = sa[nd - 2], k = sa[nd - 1], n = sb[nd - 1];
    if (sb[nd - 2] != k || (nd == 3 && sb[0] != batch)) {
        throw std::invalid_argument("matmul_new: the operands' shapes do not match");
    }
    StreamPtr stream = current_stream(a.device());
    Array out = Array::empty(nd == 3 ? Dims{batch, m, n} : Dims{m, n}, a.dtype(), stream);
    if (nd == 3) {
        matmul(a, b, out, allow_tf32, backend, stream);
    } else {
        const Dims& ta = a.strides();
        const Dims& tb = b.strides();
        const int item = a.itemsize();
        matmul(one_batch(a, m, k, ta[0], ta[1]), one_batch(b, k, n, tb[0], tb[1]),
               c_order(out, m, n, item), allow_tf32, backend, stream);
    }
    return out;
}

// out = x @ w.T, PyTorch's linear without bias: x C-contiguous [..., K] (read as M x K), w
// [N, K] with any strides (read transposed, in place), out C-contiguous with M * N elements.
void matmul_nt(const Array& x, const Array& w, const Array& out, bool allow_tf32,
               GemmBackend backend) {
    if (x.ndim() < 1 || w.ndim() != 2) {
        throw std::invalid_argument("matmul_nt takes x [..., K] and a 2-D weight [N, K]");
    }
    const int64_t n = w.shape()[0], k = w.shape()[1];
    if (x.shape().back() != k) {
        throw std::invalid_argument("matmul_nt: x's last dimension is not the weight's K");
    }
    if (!x.is_c_contiguous() || !out.is_c_contiguous()) {
        throw std::invalid_argument("matmul_nt: x and out must be C-contiguous");
    }
    int64_t m = 1;
    for (int i = 0; i + 1 < x.ndim(); ++i) m *= x.shape()[i];
    if (out.size() != m * n || out.dtype() != x.dtype()) {
        throw std::invalid_argument("matmul_nt: out must hold M x N elements of x's dtype");
    }
    const int item = x.itemsize();
    StreamPtr stream = current_stream(x.device());
    matmul(one_batch(x, m, k, k * item, item), one_batch(w, k, n, w.strides()[1], w.strides()[0]),
           c_order(out, m, n, item), allow_tf32, backend, stream);
}

// x @ w.T into a new C-contiguous [..., N] array (x [..., K]): linear without a bias in one call.
Array matmul_nt_new(const Array& x, const Array& w, bool allow_tf32, GemmBackend backend) {
    if (x.ndim() < 1 || w.ndim() != 2) {
        throw std::invalid_argument("matmul_nt takes x [..., K] and a 2-D weight [N, K]");
    }
    Dims shape = x.shape();
    shape.back() = w.shape()[0];
    Array out = Array::empty(shape, x.dtype(), current_stream(x.device()));
    matmul_nt(x, w, out, allow_tf32, backend);
    return out;
}

// ---- matmul_new, matmul_nt, matmul_nt_new: the hot paths of `a @ b` and ops.linear -------------
// Raw METH_FASTCALL functions (as binary/unary and Array.empty): pybind11's dispatcher, argument
// loaders and the std::string of the backend name cost ~0.5-1 us of a call whose whole host cost
// is ~10 us at the sizes where the host sets the pace. Errors go through pybind11's translators.

template <typename Body>
PyObject* guarded(Body&& body) {
    try {
        return body();
    } catch (py::error_already_set& e) {
        e.restore();
        return nullptr;
    } catch (...) {
        py::detail::try_translate_exceptions();
        return nullptr;
    }
}

// The _native.Array behind `o` (a reference into the Python object, alive for the call).
const Array& array_arg(PyObject* o, const char* fn, const char* name) {
    py::detail::make_caster<Array> caster;
    if (!caster.load(o, false)) {
        throw py::type_error(std::string(fn) + ": " + name + " must be a _native.Array, got " +
                             Py_TYPE(o)->tp_name);
    }
    return py::detail::cast_op<const Array&>(caster);
}

bool flag_arg(PyObject* o) {
    const int v = PyObject_IsTrue(o);
    if (v < 0) throw py::error_already_set();
    return v != 0;
}

GemmBackend backend_from(PyObject* o) {
    if (!PyUnicode_Check(o)) throw py::type_error("matmul: backend must be a str");
    Py_ssize_t n = 0;
    const char* text = PyUnicode_AsUTF8AndSize(o, &n);
    if (text == nullptr) throw py::error_already_set();
    return backend_arg(std::string(text, static_cast<size_t>(n)));
}

bool arg_count(Py_ssize_t nargs, Py_ssize_t want, const char* usage) {
    if (nargs == want) return true;
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, got %zd", usage, want, nargs);
    return false;
}

PyObject* matmul_new_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 4, "matmul_new(a, b, allow_tf32, backend)")) return nullptr;
    return guarded([&] {
        const Array& a = array_arg(args[0], "matmul_new", "a");
        const Array& b = array_arg(args[1], "matmul_new", "b");
        return py::cast(matmul_new(a, b, flag_arg(args[2]), backend_from(args[3]))).release().ptr();
    });
}

PyObject* matmul_nt_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 5, "matmul_nt(x, w, out, allow_tf32, backend)")) return nullptr;
    return guarded([&] {
        const Array& x = array_arg(args[0], "matmul_nt", "x");
        const Array& w = array_arg(args[1], "matmul_nt", "w");
        const Array& out = array_arg(args[2], "matmul_nt", "out");
        matmul_nt(x, w, out, flag_arg(args[3]), backend_from(args[4]));
        return py::none().release().ptr();
    });
}

PyObject* matmul_nt_new_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 4, "matmul_nt_new(x, w, allow_tf32, backend)")) return nullptr;
    return guarded([&] {
        const Array& x = array_arg(args[0], "matmul_nt_new", "x");
        const Array& w = array_arg(args[1], "matmul_nt_new", "w");
        return py::cast(matmul_nt_new(x, w, flag_arg(args[2]), backend_from(args[3])))
            .release()
            .ptr();
    });
}

PyCFunction fastcall(PyObject* (*f)(PyObject*, PyObject* const*, Py_ssize_t)) {
    return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

PyMethodDef kFastMethods[] = {
    {"matmul_new", fastcall(&matmul_new_fast), METH_FASTCALL,
     "matmul_new(a, b, allow_tf32, backend): a @ b of two 2-D, or two 3-D arrays of one batch "
     "size, into a new C-contiguous array on the current stream."},
    {"matmul_nt", fastcall(&matmul_nt_fast), METH_FASTCALL,
     "matmul_nt(x, w, out, allow_tf32, backend): out = x @ w.T with x C-contiguous [..., K], w "
     "[N, K] read transposed in place, out C-contiguous with M * N elements; on the current "
     "stream."},
    {"matmul_nt_new", fastcall(&matmul_nt_new_fast), METH_FASTCALL,
     "matmul_nt_new(x, w, allow_tf32, backend): x @ w.T into a new C-contiguous [..., N] array "
     "(x C-contiguous [..., K], w [N, K] read transposed in place); on the current stream."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void bind_matmul(py::module_& m) {
    m.def(
        "load_cublaslt",
        [](const std::vector<std::string>& candidates) {
            CublasLtLoadResult r = load_cublaslt(candidates);
            py::dict d = load_result_dict(r);
            d["version"] = r.version;
            return d;
        },
        py::arg("candidates"), "dlopen the first cuBLASLt candidate that loads; never raises.");
    m.def("cublaslt_loaded", &cublaslt_loaded);
    m.def(
        "cublaslt_plans",
        [](int device) {
            py::list plans;
            for (const LtPlanInfo& p : cublaslt_plans(device)) {
                py::list candidates;
                for (const LtAlgoInfo& a : p.candidates) {
                    py::dict c;
                    c["algo_id"] = a.algo_id;
                    c["tile"] = a.tile;
                    c["stages"] = a.stages;
                    c["splitk"] = a.splitk;
                    c["reduction"] = a.reduction;
                    c["swizzle"] = a.swizzle;
                    c["custom"] = a.custom;
                    c["gpu_us"] = a.gpu_us;
                    c["host_us"] = a.host_us;
                    candidates.append(c);
                }
                py::dict d;
                d["dtype"] = dtype_name(p.dtype);
                d["tf32"] = p.tf32;
                d["m"] = p.m;
                d["n"] = p.n;
                d["k"] = p.k;
                d["batch"] = p.batch;
                d["chosen"] = p.chosen;
                d["tuned"] = p.tuned;
                d["inherited"] = p.inherited;
                d["candidates"] = candidates;
                plans.append(d);
            }
            return plans;
        },
        py::arg("device"),
        "Every cuBLASLt plan made on a device: the problem (dtype, tf32, m, n, k, batch), its "
        "candidate algorithms in the heuristic's order (configuration ids and the timed pass's "
        "gpu_us / host_us per call, -1 when not timed), the index that runs, whether it was "
        "chosen by timing (tuned) or reused from a timed plan for a nearby M (inherited).");
    m.def(
        "matmul",
        [](const Array& a, const Array& b, const Array& out, bool allow_tf32,
           const std::string& backend, StreamPtr stream) {
            if (!stream) stream = current_stream(a.device());
            matmul(a, b, out, allow_tf32, backend_arg(backend), stream);
        },
        py::arg("a"), py::arg("b"), py::arg("out"), py::arg("allow_tf32") = false,
        py::arg("backend") = "auto", py::arg("stream") = py::none(),
        "out[z] = a[z] @ b[z] for 3-D (batch, m, k) @ (batch, k, n) -> (batch, m, n) "
        "C-contiguous.");
    for (PyMethodDef* def = kFastMethods; def->ml_name != nullptr; ++def) {
        PyObject* f = PyCFunction_NewEx(def, nullptr, m.attr("__name__").ptr());
        if (f == nullptr) throw py::error_already_set();
        m.add_object(def->ml_name, py::reinterpret_steal<py::object>(f));
    }
    m.def(
        "matmul_backend",
        [](const std::string& dtype, bool allow_tf32, const std::string& backend) {
            return std::string(
                matmul_backend_name(parse_dtype(dtype), allow_tf32, backend_arg(backend)));
        },
        py::arg("dtype"), py::arg("allow_tf32") = false, py::arg("backend") = "auto",
        "Which implementation matmul runs for a dtype: cublaslt, mma, simt or naive.");
}

}  // namespace pgk
