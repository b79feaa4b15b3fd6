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
