// Green contexts (SM partitions) for the scheduler: support query, acquire, streams.
#include <pybind11/pybind11.h>

#include "bindings/bindings.hpp"
#include "core/green_context.hpp"

namespace py = pybind11;

namespace pgk {

void bind_green_context(py::module_& m) {
    m.def(
        "green_context_support",
        [](int device) {
            GreenContextSupport s = green_context_support(device);
            py::dict d;
            d["supported"] = s.supported;
            d["reason"] = s.reason;
            d["sm_count"] = s.sm_count;
            d["granularity"] = s.granularity;
            d["unassigned"] = s.unassigned;
            return d;
        },
        py::arg("device"),
        "{'supported', 'reason', 'sm_count', 'granularity', 'unassigned'} for `device`; never "
        "raises for a driver without green contexts.");

    py::class_<GreenContext, GreenContextPtr>(m, "GreenContext")
        .def_static("acquire", &GreenContext::acquire, py::arg("device"), py::arg("sm_count"),
                    "A green context of `sm_count` SMs not held by another one (rounded down to "
                    "the split granularity); RuntimeError when unsupported or too few are left.")
        .def_static("unassigned", &GreenContext::unassigned, py::arg("device"),
                    "A green context over the SMs no green context holds, or None when none are "
                    "held (use the whole device) or none are left.")
        .def_property_readonly("device", &GreenContext::device)
        .def_property_readonly("sm_count", &GreenContext::sm_count)
        .def("stream", &GreenContext::stream, py::arg("priority") = 0,
             "A non-blocking stream whose kernels run on this context's SMs only.")
        .def("release", &GreenContext::release, "Give the SMs back for reuse.")
        .def("__repr__", [](const GreenContext& g) {
            return "<_native.GreenContext device=" + std::to_string(g.device()) +
                   " sm_count=" + std::to_string(g.sm_count()) + ">";
        });
}

}  // namespace pgk
