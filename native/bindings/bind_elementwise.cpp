// Elementwise ops: one call per op from Python (GPUArray operators and gp.add & co.).
// binary and unary are raw METH_FASTCALL functions: `a + b` is the hottest call of the runtime
// and pybind11's generic dispatcher (argument loaders, keyword handling) costs a few hundred ns
// of it. Errors go through pybind11's exception translators exactly as in a pybind11 function.
#include <pybind11/pybind11.h>

#include <vector>

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

// One op list: its names and, filled at module init, the same names interned.
struct OpList {
    const char* const* names;
    int count;
    const char* what;      // "binary" / "unary", for error messages
    const char* exported;  // the _native attribute that lists the names
    std::vector<PyObject*> interned;
};
OpList binary_ops{kBinaryOpNames, kNumBinaryOps, "binary", "BINARY_OPS", {}};
OpList unary_ops{kUnaryOpNames, kNumUnaryOps, "unary", "UNARY_OPS", {}};

// The code of the op named by `o` (a str). The names Python passes are interned literals, so a
// pointer comparison finds them; any other str is compared by text.
bool op_code(PyObject* o, const OpList& ops, int* op) {
    for (int i = 0; i < ops.count; ++i) {
        if (o == ops.interned[i]) {
            *op = i;
            return true;
        }
    }
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: op must be a str naming the op, not %s", ops.what,
                     Py_TYPE(o)->tp_name);
        return false;
    }
    for (int i = 0; i < ops.count; ++i) {
        if (PyUnicode_CompareWithASCIIString(o, ops.names[i]) == 0) {
            *op = i;
            return true;
        }
    }
    PyErr_Format(PyExc_ValueError, "%s: unknown op %R (the ops are in _native.%s)", ops.what, o,
                 ops.exported);
    return false;
}

// Interns the names (kept for the life of the process) and returns them as a tuple.
py::tuple intern_names(OpList& ops) {
    py::tuple names(ops.count);
    ops.interned.clear();
    for (int i = 0; i < ops.count; ++i) {
        PyObject* s = PyUnicode_InternFromString(ops.names[i]);
        if (s == nullptr) throw py::error_already_set();
        ops.interned.push_back(s);
        names[i] = py::reinterpret_borrow<py::str>(s);
    }
    return names;
}

PyObject* binary_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    int op;
    if (nargs < 3 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "binary(op, a, b, out=None) takes 3 or 4 arguments");
        return nullptr;
    }
    if (!op_code(args[0], binary_ops, &op)) return nullptr;
    py::handle out = nargs == 4 ? py::handle(args[3]) : py::handle(Py_None);
    return guarded([&] { return binary(op, args[1], args[2], out); });
}

PyObject* unary_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    int op;
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "unary(op, a, out=None) takes 2 or 3 arguments");
        return nullptr;
    }
    if (!op_code(args[0], unary_ops, &op)) return nullptr;
    py::handle out = nargs == 3 ? py::handle(args[2]) : py::handle(Py_None);
    return guarded([&] { return unary(op, args[1], out); });
}

PyMethodDef kMethods[] = {
    {"binary", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&binary_fast)),
     METH_FASTCALL,
     "binary(op, a, b, out=None): a <op> b with NumPy broadcasting and promotion; op is a name "
     "in BINARY_OPS; a and b are Arrays or scalars."},
    {"unary", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&unary_fast)),
     METH_FASTCALL, "unary(op, a, out=None): <op>(a); op is a name in UNARY_OPS."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void bind_elementwise(py::module_& m) {
    py::object name = m.attr("__name__");
    for (PyMethodDef* def = kMethods; def->ml_name != nullptr; ++def) {
        PyObject* f = PyCFunction_NewEx(def, nullptr, name.ptr());
        if (f == nullptr) throw py::error_already_set();
        m.add_object(def->ml_name, py::reinterpret_steal<py::object>(f));
    }
    // The facts the CPU backend must agree with (tests/runtime/test_cross_language_facts.py).
    m.attr("BINARY_OPS") = intern_names(binary_ops);
    m.attr("UNARY_OPS") = intern_names(unary_ops);
    py::dict promotion;
    for (int a = 0; a < kNumDTypes; ++a) {
        for (int b = 0; b < kNumDTypes; ++b) {
            const DType ta = static_cast<DType>(a), tb = static_cast<DType>(b);
            promotion[py::make_tuple(dtype_name(ta), dtype_name(tb))] =
                py::str(dtype_name(promote(ta, tb)));
        }
    }
    m.attr("PROMOTION") = promotion;
    m.def("where", &where, py::arg("cond"), py::arg("x"), py::arg("y"), py::arg("out") = py::none(),
          "x where cond else y, broadcast together.");
}

}  // namespace pgk
