// Elementwise ops: one call per op from Python (GPUArray operators and gp.add & co.).
// binary and unary are raw METH_FASTCALL functions: `a + b` is the hottest call of the runtime
// and pybind11's generic dispatcher (argument loaders, keyword handling) costs a few hundred ns
// of it. Errors go through pybind11's exception translators exactly as in a pybind11 function.
#include <pybind11/pybind11.h>

#include "bindings/bindings.hpp"
#include "ops/elementwise.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

template <typename Body>
PyObject* guarded(Body&& body) {
    try {
        return body().release().ptr();
    } catch (py::error_already_set& e) {
        e.restore();
        return nullptr;
    } catch (...) {
        py::detail::try_translate_exceptions();
        return nullptr;
    }
}

bool op_code(PyObject* o, int* op) {
    const long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return false;
    *op = static_cast<int>(v);
    return true;
}

PyObject* binary_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    int op;
    if (nargs < 3 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "binary(op, a, b, out=None) takes 3 or 4 arguments");
        return nullptr;
    }
    if (!op_code(args[0], &op)) return nullptr;
    py::handle out = nargs == 4 ? py::handle(args[3]) : py::handle(Py_None);
    return guarded([&] { return binary(op, args[1], args[2], out); });
}

PyObject* unary_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    int op;
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "unary(op, a, out=None) takes 2 or 3 arguments");
        return nullptr;
    }
    if (!op_code(args[0], &op)) return nullptr;
    py::handle out = nargs == 3 ? py::handle(args[2]) : py::handle(Py_None);
    return guarded([&] { return unary(op, args[1], out); });
}

PyMethodDef kMethods[] = {
    {"binary", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&binary_fast)),
     METH_FASTCALL,
     "binary(op, a, b, out=None): a <op> b with NumPy broadcasting and promotion; op is a code "
     "of pygpukit._elementwise_ops.BINARY_OPS; a and b are Arrays or scalars."},
    {"unary", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&unary_fast)),
     METH_FASTCALL,
     "unary(op, a, out=None): <op>(a); op is a code of pygpukit._elementwise_ops.UNARY_OPS."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void bind_elementwise(py::module_& m) {
    py::object name = m.attr("__name__");
    for (PyMethodDef* def = kMethods; def->ml_name != nullptr; ++def) {
        PyObject* f = PyCFunction_NewEx(def, nullptr, name.ptr());
        if (f == nullptr) throw py::error_already_set();
        m.add_object(def->ml_name, py::reinterpret_steal<py::object>(f));
    }
    m.def("where", &where, py::arg("cond"), py::arg("x"), py::arg("y"), py::arg("out") = py::none(),
          "x where cond else y, broadcast together.");
}

}  // namespace pgk
