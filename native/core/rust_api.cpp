#include "core/rust_api.hpp"

#include <Python.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/capi_layout.hpp"
#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "core/transfer.hpp"

namespace pgk {

std::string rust_last_error_of(const pgk_api* api);

namespace {

const pgk_api* g_api = nullptr;
// The last CUresult one of our backend callbacks returned on this thread: turns the pool's
// PGK_BACKEND_ERROR back into the CudaError that caused it.
thread_local CUresult t_backend_error = CUDA_SUCCESS;
thread_local uint64_t t_pool_epoch[kMaxDevices] = {};

// The pool may allocate or poll events while another stream of this thread is being captured
// (thread-local capture mode forbids "unsafe" calls then): these calls are safe, so they run in
// relaxed mode for their duration.
class RelaxedCaptureMode {
  public:
    RelaxedCaptureMode() {
        mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
        ok_ = drv().cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
    }
    ~RelaxedCaptureMode() {
        if (ok_) drv().cuThreadExchangeStreamCaptureMode(&mode_);
    }

  private:
    CUstreamCaptureMode mode_;
    bool ok_;
};

int report(CUresult r) {
    if (r != CUDA_SUCCESS) t_backend_error = r;
    return static_cast<int>(r);
}

// Each callback: no exception may cross into Rust.
template <typename F>
int guarded(int device, F&& body) {
    try {
        if (device >= 0) bind_device(device);
        return report(body());
    } catch (const CudaError& e) {
        return report(static_cast<CUresult>(e.code()));
    } catch (...) {
        return report(CUDA_ERROR_UNKNOWN);
    }
}

// Calls that name a stream need a context on the calling thread. The transfer engine's upload
// workers are pool threads that never called into CUDA: they get the stream's context. A thread
// that already has one keeps it, as before the workers existed: a partition's stream belongs to
// a green context, which must not become current behind the caller's back (a green context may be
// current to one thread at a time, and the pool binds the primary context again on its next
// allocation).
void bind_stream_context(pgk_stream stream) {
    CUcontext current = nullptr;
    check(drv().cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    if (current != nullptr) return;
    CUcontext own = nullptr;
    check(drv().cuStreamGetCtx(reinterpret_cast<CUstream>(stream), &own), "cuStreamGetCtx");
    check(drv().cuCtxSetCurrent(own), "cuCtxSetCurrent");
}

template <typename F>
int guarded_on(pgk_stream stream, F&& body) {
    return guarded(-1, [&] {
        bind_stream_context(stream);
        return body();
    });
}

int be_mem_alloc(void*, int32_t device, uint64_t nbytes, pgk_devptr* out) {
    return guarded(device, [&] {
        RelaxedCaptureMode relaxed;
        CUdeviceptr ptr = 0;
        CUresult r = drv().cuMemAlloc(&ptr, nbytes);
        *out = ptr;
        return r;
    });
}
int be_mem_free(void*, int32_t device, pgk_devptr ptr) {
    return guarded(device, [&] {
        RelaxedCaptureMode relaxed;
        return drv().cuMemFree(ptr);
    });
}
int be_mem_get_info(void*, int32_t device, uint64_t* free_bytes, uint64_t* total_bytes) {
    return guarded(device, [&] {
        size_t f = 0, t = 0;
        CUresult r = drv().cuMemGetInfo(&f, &t);
        *free_bytes = f;
        *total_bytes = t;
        return r;
    });
}
int be_host_alloc(void*, uint64_t nbytes, void** out) {
    return guarded(0, [&] {
        RelaxedCaptureMode relaxed;
        return drv().cuMemHostAlloc(out, nbytes, CU_MEMHOSTALLOC_PORTABLE);
    });
}
int be_host_free(void*, void* ptr) {
    return guarded(0, [&] {
        RelaxedCaptureMode relaxed;
        return drv().cuMemFreeHost(ptr);
    });
}
int be_event_create(void*, int32_t device, pgk_event* out) {
    return guarded(device, [&] {
        CUevent ev = nullptr;
        CUresult r = drv().cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
        *out = reinterpret_cast<pgk_event>(ev);
        return r;
    });
}
int be_event_destroy(void*, pgk_event ev) {
    return guarded(-1, [&] { return drv().cuEventDestroy(reinterpret_cast<CUevent>(ev)); });
}
int be_event_record(void*, pgk_event ev, pgk_stream stream) {
    return guarded_on(stream, [&] {
        return drv().cuEventRecord(reinterpret_cast<CUevent>(ev),
                                   reinterpret_cast<CUstream>(stream));
    });
}
int be_event_query(void*, pgk_event ev) {
    // CUDA_ERROR_NOT_READY is an answer, not a failure: do not record it as the last error.
    try {
        RelaxedCaptureMode relaxed;
        CUresult r = drv().cuEventQuery(reinterpret_cast<CUevent>(ev));
        return r == CUDA_ERROR_NOT_READY ? static_cast<int>(r) : report(r);
    } catch (...) {
        return report(CUDA_ERROR_UNKNOWN);
    }
}
int be_event_synchronize(void*, pgk_event ev) {
    return guarded(-1, [&] {
        RelaxedCaptureMode relaxed;
        return drv().cuEventSynchronize(reinterpret_cast<CUevent>(ev));
    });
}
int be_stream_wait_event(void*, pgk_stream stream, pgk_event ev) {
    return guarded_on(stream, [&] {
        return drv().cuStreamWaitEvent(reinterpret_cast<CUstream>(stream),
                                       reinterpret_cast<CUevent>(ev), 0);
    });
}
int be_memcpy_async(void*, uint64_t dst, uint64_t src, uint64_t nbytes, pgk_stream stream) {
    return guarded_on(stream, [&] {
        return drv().cuMemcpyAsync(dst, src, nbytes, reinterpret_cast<CUstream>(stream));
    });
}
int be_stream_is_capturing(void*, pgk_stream stream, int* capturing) {
    return guarded_on(stream, [&] {
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        CUresult r = drv().cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), &status);
        *capturing = status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? 1 : 0;
        return r;
    });
}

int be_pull_launch(void*, int32_t device, pgk_stream stream, const pgk_pull_args* args) {
    return guarded(device, [&] {
        return launch_upload_pull(device, reinterpret_cast<CUstream>(stream), *args);
    });
}

const pgk_device_backend kBackend = {
    nullptr,         be_mem_alloc,           be_mem_free,          be_mem_get_info,
    be_host_alloc,   be_host_free,           be_event_create,      be_event_destroy,
    be_event_record, be_event_query,         be_event_synchronize, be_stream_wait_event,
    be_memcpy_async, be_stream_is_capturing, be_pull_launch,
};

std::string python_error_text() {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    std::string text = "unknown error";
    if (value != nullptr) {
        PyObject* s = PyObject_Str(value);
        if (s != nullptr) {
            const char* utf8 = PyUnicode_AsUTF8(s);
            if (utf8 != nullptr) text = utf8;
            Py_DECREF(s);
        }
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    PyErr_Clear();
    return text;
}

const pgk_api* import_api() {
    PyGILState_STATE gil = PyGILState_Ensure();
    // PyCapsule_Import reaches "_rust" as an attribute of the package, which exists only once
    // the submodule was imported: import it first.
    PyObject* module = PyImport_ImportModule("pygpukit._rust");
    Py_XDECREF(module);
    void* capsule = module ? PyCapsule_Import(PGK_CAPI_CAPSULE_NAME, 0) : nullptr;
    std::string error = capsule == nullptr ? python_error_text() : "";
    // The header and Rust's mirrors are written by hand: compare their layouts field by field.
    const std::string layout_error = capsule != nullptr ? capi_layout_mismatch() : "";
    PyGILState_Release(gil);
    if (capsule == nullptr) {
        throw MissingComponentError(
            "pygpukit._rust does not provide its C API (" PGK_CAPI_CAPSULE_NAME "): " + error +
            ". Every device allocation goes through the Rust memory pool; reinstall "
            "pygpukit-runtime (or rebuild with tools/dev_build.py).");
    }
    const auto* api = static_cast<const pgk_api*>(capsule);
    if (api->version != PGK_CAPI_VERSION || api->struct_size < sizeof(pgk_api)) {
        throw MissingComponentError(
            "pygpukit._rust C API mismatch: version " + std::to_string(api->version) + " (size " +
            std::to_string(api->struct_size) + "), _native expects version " +
            std::to_string(PGK_CAPI_VERSION) + " (size " + std::to_string(sizeof(pgk_api)) +
            "); pygpukit._rust and pygpukit._native come from different builds");
    }
    if (!layout_error.empty()) {
        throw MissingComponentError(
            "pygpukit._rust and pygpukit._native disagree on the C API layout (" + layout_error +
            "); rebuild both from one checkout");
    }
    pgk_status status = api->register_backend(&kBackend, device_count());
    if (status != PGK_OK) {
        throw MissingComponentError("pygpukit._rust refused the CUDA backend: " +
                                    rust_last_error_of(api));
    }
    return api;
}

}  // namespace

std::string rust_last_error_of(const pgk_api* api) {
    char buf[512] = {0};
    size_t n = api->last_error(buf, sizeof(buf));
    (void)n;
    return buf;
}

bool rust_api_ready() { return g_api != nullptr; }

const pgk_api& rust_api() {
    if (g_api == nullptr) {
        // Imported under the GIL, which also serializes concurrent first callers.
        PyGILState_STATE gil = PyGILState_Ensure();
        try {
            if (g_api == nullptr) g_api = import_api();
        } catch (...) {
            PyGILState_Release(gil);
            throw;
        }
        PyGILState_Release(gil);
    }
    return *g_api;
}

std::string rust_last_error() { return g_api ? rust_last_error_of(g_api) : std::string(); }

namespace {

// A refused pool call as the exception the caller sees; `nbytes` is what was asked for.
[[noreturn]] void throw_pool_error(pgk_status status, uint64_t nbytes, const char* what) {
    switch (status) {
        case PGK_OUT_OF_MEMORY:
        case PGK_LIMIT_EXCEEDED:
            throw OutOfMemoryError(nbytes, rust_last_error());
        case PGK_INVALID_ARGUMENT:
            // Not a device failure: e.g. an allocation inside a deleted partition. The pool's
            // message says what was wrong and what to do.
            throw std::runtime_error(rust_last_error());
        case PGK_BACKEND_ERROR:
            if (t_backend_error != CUDA_SUCCESS) throw_cuda_error(t_backend_error, what);
            [[fallthrough]];
        default:
            throw CudaError(CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN",
                            std::string(what) + ": " + rust_last_error());
    }
}

}  // namespace

uint64_t pool_epoch(int device) { return t_pool_epoch[device]; }

PoolBlock pool_alloc(int device, uint64_t nbytes, uint64_t stream, uint32_t flags) {
    const pgk_api& api = rust_api();
    ++t_pool_epoch[device];
    pgk_block block{};
    // A cached block first, GIL held: the common case never waits, and releasing and retaking
    // the GIL (two atomic handoffs, ~0.1-0.3 us) would cost more than the lookup itself.
    t_backend_error = CUDA_SUCCESS;
    pgk_status status = api.pool_alloc(device, nbytes, stream, flags | PGK_ALLOC_NO_WAIT, &block);
    if (status == PGK_WOULD_BLOCK) {
        // A new segment, a release or a spill may wait on the device: without the GIL.
        GilRelease nogil;
        t_backend_error = CUDA_SUCCESS;
        status = api.pool_alloc(device, nbytes, stream, flags, &block);
    }
    if (status != PGK_OK) throw_pool_error(status, nbytes, "pool_alloc");
    return PoolBlock{block.id, block.ptr, block.size};
}

PoolBlock pool_touch(int device, uint64_t block_id, uint64_t nbytes, uint64_t stream) {
    const pgk_api& api = rust_api();
    ++t_pool_epoch[device];
    pgk_block block{};
    pgk_status status;
    {
        GilRelease nogil;
        t_backend_error = CUDA_SUCCESS;
        status = api.pool_touch(block_id, stream, &block);
    }
    if (status != PGK_OK) throw_pool_error(status, nbytes, "pool_touch");
    return PoolBlock{block.id, block.ptr, block.size};
}

void pool_touch_all(int device, const std::vector<uint64_t>& ids, uint64_t nbytes, uint64_t stream,
                    std::vector<PoolBlock>& out) {
    const pgk_api& api = rust_api();
    ++t_pool_epoch[device];
    std::vector<pgk_block> blocks(ids.size());
    pgk_status status;
    {
        GilRelease nogil;
        t_backend_error = CUDA_SUCCESS;
        status = api.pool_touch_all(ids.data(), ids.size(), stream, blocks.data());
    }
    if (status != PGK_OK) throw_pool_error(status, nbytes, "pool_touch_all");
    out.clear();
    for (const pgk_block& b : blocks) out.push_back(PoolBlock{b.id, b.ptr, b.size});
}

DispatchTicket::DispatchTicket(const pgk_api& api, int device, uint64_t stream) : api_(api) {
    pgk_status status = api_.dispatch_begin(device, stream, &ticket_);
    if (status != PGK_OK) {
        throw CudaError(CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED",
                        "dispatch controller refused the launch: " + rust_last_error());
    }
    open_ = true;
}

DispatchTicket::~DispatchTicket() {
    if (open_) api_.dispatch_end(ticket_, 0);
}

void DispatchTicket::end(bool ok) {
    api_.dispatch_end(ticket_, ok ? 1 : 0);
    open_ = false;
}

}  // namespace pgk
