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

// The stream argument convention of every binding: a Stream, or None for the current stream of
// `device`.
}  // namespace pgk
