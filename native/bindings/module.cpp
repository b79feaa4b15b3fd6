// pygpukit._native: the pybind11 module. Each binding file registers its part.
#include <pybind11/pybind11.h>

#include "bindings/bindings.hpp"
#include "core/capi_layout.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
    m.doc() = "PyGPUkit's C++ core: every CUDA call (driver, NVRTC, cuBLASLt) goes through here.";
    pgk::bind_errors(m);
    pgk::bind_device(m);
    pgk::bind_stream(m);
    pgk::bind_array(m);
    pgk::bind_dlpack(m);
    pgk::bind_jit(m);
    pgk::bind_elementwise(m);
    pgk::bind_matmul(m);
    pgk::bind_reduce(m);
    pgk::bind_green_context(m);
    m.def("capi_layout", &pgk::capi_layout,
          "The Rust C API's version, struct layouts and constants as C++ compiles them; "
          "pygpukit._rust.capi_layout() must return the same.");
    m.def("capi_layout_mismatch", &pgk::capi_layout_mismatch,
          "What differs first between pygpukit._rust.capi_layout() and capi_layout(), or \"\": the "
          "check made when the C API capsule is imported.");
}
