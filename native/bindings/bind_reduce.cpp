// Reductions, softmax, cumsum, take and triu/tril (pygpukit.reductions / pygpukit.shape_ops call
// these through backend/cuda_reduce.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/bindings.hpp"
#include "ops/reduce.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

StreamPtr stream_or_current(const StreamPtr& stream, const Array& a) {
    if (!stream) return current_stream(a.device());
    if (stream->device() != a.device()) {
        throw std::invalid_argument("the stream is on device " + std::to_string(stream->device()) +
                                    ", the array on device " + std::to_string(a.device()));
    }
    return stream;
}

}  // namespace

void bind_reduce(py::module_& m) {
    m.def(
        "reduce",
        [](const std::string& op, const Array& a, const std::vector<int>& axes, int ddof,
           StreamPtr stream) { return reduce(op, a, axes, ddof, stream_or_current(stream, a)); },
        py::arg("op"), py::arg("a"), py::arg("axes"), py::arg("ddof") = 0,
        py::arg("stream") = nullptr,
        "Reduce a non-empty array over axes (sum prod mean var std max min argmax argmin all "
        "any); the result in the accumulator dtype, reduced axes removed.");
    m.def(
        "softmax",
        [](const Array& a, int axis, bool log, StreamPtr stream) {
            return softmax(a, axis, log, stream_or_current(stream, a));
        },
        py::arg("a"), py::arg("axis"), py::arg("log") = false, py::arg("stream") = nullptr,
        "Softmax (log-softmax with log=True) along axis, in the input's floating dtype.");
    m.def(
        "cumsum",
        [](const Array& a, int axis, StreamPtr stream) {
            return cumsum(a, axis, stream_or_current(stream, a));
        },
        py::arg("a"), py::arg("axis"), py::arg("stream") = nullptr,
        "Inclusive prefix sum along axis (floats keep their dtype, integers give int64).");
    m.def(
        "take",
        [](const Array& a, const Array& indices, int axis, int mode, StreamPtr stream) {
            return take(a, indices, axis, mode, stream_or_current(stream, a));
        },
        py::arg("a"), py::arg("indices"), py::arg("axis"), py::arg("mode") = 0,
        py::arg("stream") = nullptr,
        "Gather along axis at 1-D int64 indices (mode 0: checked, 1: wrap, 2: clip).");
    m.def(
        "tri",
        [](const Array& a, long long k, bool upper, StreamPtr stream) {
            return tri(a, k, upper, stream_or_current(stream, a));
        },
        py::arg("a"), py::arg("k"), py::arg("upper"), py::arg("stream") = nullptr,
        "triu (upper=True) or tril of the last two axes, as a new array.");
}

}  // namespace pgk
