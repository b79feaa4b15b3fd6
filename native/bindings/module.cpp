// pygpukit._native: the pybind11 module. Each binding file registers its part.
#include <pybind11/pybind11.h>

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
    m.doc() = "PyGPUkit's C++ core: every CUDA call (driver, NVRTC, cuBLASLt) goes through here.";
}
