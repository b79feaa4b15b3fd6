#include "ops/copy.hpp"

#include <stdexcept>
#include <string>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/event.hpp"
#include "core/residency.hpp"
#include "core/transfer.hpp"
#include "ops/strided.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

void check_stream(const Stream& stream, const Array& a, const char* what) {
    if (stream.device() != a.device()) {
        throw std::invalid_argument(std::string(what) + ": the array is on device " +
                                    std::to_string(a.device()) + ", the stream on device " +
                                    std::to_string(stream.device()));
    }
}

// The host array as a C-contiguous ndarray of the same dtype and shape as `a`.
py::array checked_host(py::array host, const Array& a, const char* what, bool writeable) {
    const std::string name = py::str(host.dtype().attr("name"));
    if (name != dtype_name(a.dtype())) {
        throw py::type_error(std::string(what) + ": host array has dtype " + name +
                             ", the device array " + dtype_name(a.dtype()));
    }
    Dims host_shape(host.shape(), host.shape() + host.ndim());
    check_same_shape(host_shape, a.shape(), what);
    const bool c_contiguous = (host.flags() & py::array::c_style) != 0;
    if (writeable) {
        if (!c_contiguous || !host.writeable()) {
            throw std::invalid_argument(std::string(what) +
                                        ": the host array must be C-contiguous and writeable");
        }
        return host;
    }
    if (c_contiguous) return host;
    return py::module_::import("numpy").attr("ascontiguousarray")(host);
}

std::string shape_text(const Dims& shape) {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

void check_same_shape(const Dims& a, const Dims& b, const char* what) {
    if (a != b) {
        throw std::invalid_argument(std::string(what) + ": shapes " + shape_text(a) + " and " +
                                    shape_text(b) + " differ");
    }
}

Array contiguous(const Array& a, const StreamPtr& stream) {
    if (a.is_c_contiguous()) return a;
    check_stream(*stream, a, "contiguous");
    Array out = Array::empty(a.shape(), a.dtype(), stream);
    make_resident(stream, {&out, &a});
    strided_copy(out.data_ptr(), out.strides(), a.data_ptr(), a.strides(), a.shape(), a.itemsize(),
                 *stream);
    a.buffer()->used_on(stream);
    return out;
}

namespace {

// From this size a transfer between pageable memory and the device goes through the transfer
// engine (uploads: the upload kernel's ring or pinned staging, ~50 GB/s on an H200 host;
// downloads: the pinned pipeline); below it the direct copy's fixed cost (one driver call) wins.
// The driver's own pageable copies run at ~9 GB/s (uploads) and ~4 GB/s (downloads).
constexpr uint64_t kPipelinedBytes = 1ull << 20;

// Page-locked host memory (cuMemHostAlloc, as gp.memory.pinned_empty's, or registered): the copy
// engine reads and writes it directly at full speed, staging would only add a host copy.
bool is_pinned_host(const void* p) {
    unsigned int type = 0;
    return drv().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                       reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS &&
           type == CU_MEMORYTYPE_HOST;
}

}  // namespace

void copy_from_host(const Array& dst, py::array host, const StreamPtr& stream, bool blocking) {
    check_stream(*stream, dst, "copy_from_host");
    py::array src = checked_host(host, dst, "copy_from_host", false);
    const uint64_t nbytes = static_cast<uint64_t>(dst.nbytes());
    if (nbytes == 0) return;
    // Refused in capture in both modes: a captured copy would re-read the host (or staging)
    // memory at every replay. Graph inputs belong in device buffers written before replay.
    ensure_not_capturing(stream->handle(), "copy_from_host");
    // A strided destination receives the bytes in a contiguous temporary first.
    const Array target =
        dst.is_c_contiguous() ? dst : Array::empty(dst.shape(), dst.dtype(), stream);
    make_resident(stream, {&dst, &target});
    bind_device(stream->device());
    // Blocking: small or pinned sources go straight to the copy engine, large pageable ones
    // through the transfer engine like non-blocking ones (then the stream is synchronized).
    const bool direct = blocking && (nbytes < kPipelinedBytes || is_pinned_host(src.data()));
    if (direct) {
        check(drv().cuMemcpyHtoDAsync(target.data_ptr(), src.data(), nbytes, stream->handle()),
              "cuMemcpyHtoDAsync");
    } else {
        // `src` stays referenced here and the engine has read all of it when this returns.
        transfer_to_device(target.data_ptr(), src.data(), nbytes, stream);
    }
    if (!dst.is_c_contiguous()) {
        strided_copy(dst.data_ptr(), dst.strides(), target.data_ptr(), target.strides(),
                     dst.shape(), dst.itemsize(), *stream);
    }
    dst.buffer()->used_on(stream);
    if (blocking) {
        py::gil_scoped_release nogil;
        check(drv().cuStreamSynchronize(stream->handle()), "cuStreamSynchronize");
    }
}

void copy_to_host(const Array& src, py::array host, const StreamPtr& stream) {
    check_stream(*stream, src, "copy_to_host");
    checked_host(host, src, "copy_to_host", true);
    const uint64_t nbytes = static_cast<uint64_t>(src.nbytes());
    if (nbytes == 0) return;
    ensure_not_capturing(stream->handle(), "copy_to_host");
    bind_device(stream->device());
    if (nbytes >= kPipelinedBytes && !is_pinned_host(host.data())) {
        // cuMemcpyDtoH into pageable memory runs at ~4 GB/s (the driver stages through small
        // buffers on one thread). The transfer engine copies 16 MiB chunks into its pinned
        // staging on the D2H copy stream and out to `host` on its copy threads while the next
        // chunks are in flight: several times faster. The copy stream waits for `stream`.
        HostDownload download(src, host, stream);
        py::gil_scoped_release nogil;
        download.run();
        return;
    }
    const Array packed = contiguous(src, stream);
    make_resident(stream, {&packed});
    bind_device(stream->device());
    src.buffer()->used_on(stream);
    void* out = host.mutable_data();
    py::gil_scoped_release nogil;
    check(drv().cuMemcpyDtoHAsync(out, packed.data_ptr(), nbytes, stream->handle()),
          "cuMemcpyDtoHAsync");
    check(drv().cuStreamSynchronize(stream->handle()), "cuStreamSynchronize");
}

HostDownload::HostDownload(const Array& src, py::array host, const StreamPtr& stream)
    : packed_(src), host_(host) {
    check_stream(*stream, src, "copy_to_host");
    checked_host(host, src, "copy_to_host", true);
    ensure_not_capturing(stream->handle(), "copy_to_host");
    if (src.nbytes() == 0) return;
    if (src.buffer()->evictable()) {
        // The pool could spill an evictable source while the copy stream still reads it (its
        // idle fence knows only `stream`): download a private copy instead.
        packed_ = Array::empty(src.shape(), src.dtype(), stream);
        copy_device(packed_, src, stream);
    } else {
        packed_ = contiguous(src, stream);
    }
    src.buffer()->used_on(stream);
    order_download_after(stream);
    host_ptr_ = host.mutable_data();
    nbytes_ = static_cast<uint64_t>(src.nbytes());
}

void HostDownload::run() {
    if (done_ || nbytes_ == 0) return;
    transfer_to_host(packed_.device(), host_ptr_, packed_.data_ptr(), nbytes_);
    done_ = true;
}

void copy_device(const Array& dst, const Array& src, const StreamPtr& stream) {
    check_same_shape(dst.shape(), src.shape(), "copy_from");
    if (dst.dtype() != src.dtype()) {
        throw py::type_error(std::string("copy_from: dtypes differ (") + dtype_name(dst.dtype()) +
                             " and " + dtype_name(src.dtype()) + "); use astype()");
    }
    check_stream(*stream, dst, "copy_from");
    if (dst.size() == 0) return;
    if (src.device() == dst.device()) {
        make_resident(stream, {&dst, &src});
        if (dst.is_c_contiguous() && src.is_c_contiguous()) {
            bind_device(stream->device());
            check(
                drv().cuMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(), stream->handle()),
                "cuMemcpyAsync");
        } else {
            strided_copy(dst.data_ptr(), dst.strides(), src.data_ptr(), src.strides(), dst.shape(),
                         dst.itemsize(), *stream);
        }
    } else {
        // Across devices: pack on the source device (its current stream), let `stream` wait for
        // that, copy peer-to-peer, then scatter on the destination device if it is strided.
        StreamPtr src_stream = current_stream(src.device());
        const Array packed = contiguous(src, src_stream);
        const Array target =
            dst.is_c_contiguous() ? dst : Array::empty(dst.shape(), dst.dtype(), stream);
        // Per device: the destination's allocation cannot spill the source's blocks.
        make_resident(stream, {&dst, &target});
        make_resident(src_stream, {&packed});
        Event ready(src.device(), false);
        ready.record(*src_stream);
        stream->wait_event(ready);
        bind_device(dst.device());
        CUcontext dst_ctx = nullptr, src_ctx = nullptr;
        check(drv().cuCtxGetCurrent(&dst_ctx), "cuCtxGetCurrent");
        bind_device(src.device());
        check(drv().cuCtxGetCurrent(&src_ctx), "cuCtxGetCurrent");
        bind_device(dst.device());
        check(drv().cuMemcpyPeerAsync(target.data_ptr(), dst_ctx, packed.data_ptr(), src_ctx,
                                      dst.nbytes(), stream->handle()),
              "cuMemcpyPeerAsync");
        // The source side's buffers are freed on the source stream: order it after the copy.
        Event copied(dst.device(), false);
        copied.record(*stream);
        src_stream->wait_event(copied);
        packed.buffer()->used_on(src_stream);
        src.buffer()->used_on(src_stream);
        if (!dst.is_c_contiguous()) {
            strided_copy(dst.data_ptr(), dst.strides(), target.data_ptr(), target.strides(),
                         dst.shape(), dst.itemsize(), *stream);
        }
        dst.buffer()->used_on(stream);
        return;
    }
    dst.buffer()->used_on(stream);
    src.buffer()->used_on(stream);
}

}  // namespace pgk
