// One registration function per binding file; module.cpp calls them in order.
#pragma once

#include <pybind11/pybind11.h>

namespace pgk {

void bind_errors(pybind11::module_& m);
void bind_device(pybind11::module_& m);
void bind_stream(pybind11::module_& m);
void bind_array(pybind11::module_& m);
void bind_dlpack(pybind11::module_& m);
void bind_jit(pybind11::module_& m);
void bind_elementwise(pybind11::module_& m);
void bind_matmul(pybind11::module_& m);
void bind_reduce(pybind11::module_& m);
void bind_green_context(pybind11::module_& m);

// The Python view of a library loader's result (load_driver, load_nvrtc, load_cublaslt):
// {"loaded", "path" (None unless loaded), "tried": [(path, error), ...]}. Each binding adds the
// library's own version field.
template <typename LoadResult>
pybind11::dict load_result_dict(const LoadResult& r) {
    pybind11::dict d;
    d["loaded"] = r.loaded;
    d["path"] = r.loaded ? pybind11::object(pybind11::str(r.path)) : pybind11::none();
    pybind11::list tried;
    for (const auto& [path, error] : r.tried) tried.append(pybind11::make_tuple(path, error));
    d["tried"] = tried;
    return d;
}

}  // namespace pgk
