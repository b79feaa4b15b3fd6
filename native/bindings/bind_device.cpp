// Driver loading and devices.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/bindings.hpp"
#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/rust_api.hpp"

namespace py = pybind11;

namespace pgk {

void bind_device(py::module_& m) {
    m.def(
        "load_driver",
        [](const std::vector<std::string>& candidates) {
            DriverLoadResult r = load_driver(candidates);
            py::dict d = load_result_dict(r);
            d["driver_version"] = r.driver_version;
            return d;
        },
        py::arg("candidates"), "dlopen the first libcuda candidate that loads; never raises.");
    m.def("init", &init_driver, "cuInit(0).");
    m.def(
        "connect_memory_pool", [] { rust_api(); },
        "Import pygpukit._rust's C API and register the CUDA device backend with its pools "
        "(once; the backend calls it when it starts, so gp.memory sees the GPU pools at once).");
    m.def("device_count", &device_count);
    m.def(
        "device_info",
        [](int device) {
            DeviceInfo i = device_info(device);
            py::dict d;
            d["name"] = i.name;
            d["sm"] = py::make_tuple(i.sm_major, i.sm_minor);
            d["sm_count"] = i.sm_count;
            d["total_memory"] = i.total_memory;
            d["l2_cache_bytes"] = i.l2_cache_bytes;
            d["shared_mem_per_block"] = i.shared_mem_per_block;
            d["shared_mem_per_block_optin"] = i.shared_mem_per_block_optin;
            d["shared_mem_per_sm"] = i.shared_mem_per_sm;
            d["clock_khz"] = i.clock_khz;
            d["memory_clock_khz"] = i.memory_clock_khz;
            d["memory_bus_width"] = i.memory_bus_width;
            d["driver_version"] = i.driver_version;
            d["pci_bus_id"] = i.pci_bus_id;
            return d;
        },
        py::arg("device"));
    m.def("set_device", &set_device, py::arg("device"));
    m.def("get_device", &get_device);
    m.def("synchronize", &synchronize_device, py::arg("device"),
          py::call_guard<py::gil_scoped_release>());
    m.def("target_arch", &target_arch, py::arg("device"),
          "NVRTC target of the device's exact architecture, e.g. 'sm_90a'.");
}

}  // namespace pgk
