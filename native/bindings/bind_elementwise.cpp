// Elementwise ops: one call per op from Python (GPUArray operators and gp.add & co.).
#include <pybind11/pybind11.h>

#include "bindings/bindings.hpp"
#include "ops/elementwise.hpp"

namespace py = pybind11;

namespace pgk {

void bind_elementwise(py::module_& m) {
    m.def("binary", &binary, py::arg("op"), py::arg("a"), py::arg("b"), py::arg("out") = py::none(),
          "a <op> b with NumPy broadcasting and promotion; op is a code of "
          "pygpukit.elementwise.BINARY_OPS; a and b are Arrays or scalars.");
    m.def("unary", &unary, py::arg("op"), py::arg("a"), py::arg("out") = py::none(),
          "<op>(a); op is a code of pygpukit.elementwise.UNARY_OPS.");
    m.def("where", &where, py::arg("cond"), py::arg("x"), py::arg("y"), py::arg("out") = py::none(),
          "x where cond else y, broadcast together.");
}

}  // namespace pgk
