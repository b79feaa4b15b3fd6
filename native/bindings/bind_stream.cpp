// Streams, events, graph capture.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/bindings.hpp"
#include "core/device.hpp"
#include "core/event.hpp"
#include "core/gil.hpp"
#include "core/graph.hpp"
#include "core/stream.hpp"

namespace py = pybind11;

namespace pgk {

void bind_stream(py::module_& m) {
    py::class_<Stream, StreamPtr>(m, "Stream")
        .def(py::init([](int device, int priority) { return Stream::create(device, priority); }),
             py::arg("device"), py::arg("priority") = 0, "A new non-blocking stream.")
        .def_static(
            "wrap",
            [](uint64_t handle, int device) {
                return Stream::wrap(reinterpret_cast<CUstream>(handle), device);
            },
            py::arg("handle"), py::arg("device"), "A foreign stream (not destroyed here).")
        .def_property_readonly("handle", &Stream::id)
        .def_property_readonly("device", &Stream::device)
        .def_property_readonly("priority", &Stream::priority)
        .def("synchronize", &Stream::synchronize, py::call_guard<py::gil_scoped_release>())
        .def("query", &Stream::query)
        .def("wait_event", &Stream::wait_event, py::arg("event"))
        .def("__eq__",
             [](const Stream& a, py::object b) {
                 return py::isinstance<Stream>(b) && a.handle() == b.cast<const Stream&>().handle();
             })
        .def("__hash__", [](const Stream& s) { return py::hash(py::int_(s.id())); })
        .def("__repr__", [](const Stream& s) {
            return "<_native.Stream device=" + std::to_string(s.device()) +
                   " handle=" + std::to_string(s.id()) + ">";
        });

    m.def(
        "current_stream",
        [](py::object device) {
            return device.is_none() ? current_stream() : current_stream(device.cast<int>());
        },
        py::arg("device") = py::none());
    m.def("default_stream", &default_stream, py::arg("device"),
          "The device's default stream: a thread's current stream until it sets another; owned "
          "by the runtime for the whole process.");
    m.def(
        "set_current_stream",
        [](StreamPtr stream, py::object device) {
            set_current_stream(stream, device.is_none() ? get_device() : device.cast<int>());
        },
        py::arg("stream"), py::arg("device") = py::none(),
        "Make `stream` current for its device on this thread; None restores the default.");
    m.def("priority_range", &priority_range, py::arg("device"));
    m.def(
        "set_launches_keep_gil",
        [](bool keep) {
            const bool was = t_launches_keep_gil;
            t_launches_keep_gil = keep;
            return was;
        },
        py::arg("keep"),
        "Whether this thread's kernel launches and graph replays keep the GIL (default False: "
        "they release it); returns the previous setting.");

    py::class_<Event, std::shared_ptr<Event>>(m, "Event")
        .def(py::init<int, bool>(), py::arg("device"), py::arg("timing") = false)
        .def(
            "record",
            [](Event& e, StreamPtr stream) {
                e.record(stream ? *stream : *current_stream(e.device()));
            },
            py::arg("stream") = nullptr)
        .def("query", &Event::query)
        .def("synchronize", &Event::synchronize, py::call_guard<py::gil_scoped_release>())
        .def("elapsed_time", &Event::elapsed_time, py::arg("end"))
        .def_property_readonly(
            "handle", [](const Event& e) { return reinterpret_cast<uint64_t>(e.handle()); })
        .def_property_readonly("device", &Event::device);

    py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph")
        .def(
            "replay",
            [](Graph& g, StreamPtr stream) {
                g.replay(stream ? stream : current_stream(g.device()));
            },
            py::arg("stream") = nullptr)
        .def_property_readonly("device", &Graph::device);

    m.def("begin_capture", &begin_capture, py::arg("stream"));
    m.def("end_capture", &end_capture, py::arg("stream"));
}

}  // namespace pgk
