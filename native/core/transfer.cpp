#include "core/transfer.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/errors.hpp"
#include "core/event.hpp"
#include "core/gil.hpp"
#include "core/rust_api.hpp"
#include "jit/builtin.hpp"

namespace pgk {

namespace {

// Downloads: 16 MiB chunks, 8 in flight (uploads use the engine's own constants, 4 MiB chunks
// staged by up to 16 threads: rust/pygpukit-core/src/upload.rs). A chunk's per-chunk costs (an
// event, a driver call, handing 1 MiB parts to the engine's copy threads: ~10-20 us) are a few
// percent of its ~300 us of DMA at 55 GB/s. Eight slots let the DMA run up to 7 chunks ahead of
// the host copy out of staging, so a late host copy (page faults, another process) never idles
// the copy engine, and the first copy-out starts after 16 MiB instead of 32. Still 128 MiB of
// pinned staging at most (as for uploads: 32 slots of 4 MiB); the Rust pinned pool keeps it
// (pinned and touched) for the next transfer. A copy shorter than 8 chunks is cut into 8 (down to
// 1 MiB) so that it still pipelines (Downloads::chunk_for in rust/pygpukit-core/src/download.rs).
constexpr uint64_t kChunkBytes = 16ull << 20;
constexpr uint32_t kSlots = 8;

// Large uploads are pulled through a cached ring by this kernel (see upload_pull.cu), 512 threads
// per block.
const BuiltinKernel& upload_kernel() {
    static const BuiltinKernel kernel("upload_pull", "upload_pull");
    return kernel;
}
constexpr unsigned kUploadThreads = 512;

struct CopyStreams {
    std::once_flag configured;
    // Held for the life of the process: the Rust engine keeps their handles.
    StreamPtr h2d;
    StreamPtr d2h;
    StreamPtr pull;  // null when uploads are staged only
};

// PYGPUKIT_UPLOAD_KERNEL=0 keeps every upload on the copy engine: no SMs used for uploads.
bool upload_kernel_enabled() {
    const char* env = std::getenv("PYGPUKIT_UPLOAD_KERNEL");
    return env == nullptr || std::strcmp(env, "0") != 0;
}

// Whether the upload kernel suits `device`: it reads pinned host memory through its device
// mapping (unified addressing, host memory mapped), runs for as long as the host copy does (a
// display watchdog could kill it, losing the context), and takes 16 blocks' worth of SMs from the
// kernels beside an upload (a device of fewer than 48 SMs keeps them all for compute).
// A failed query counts as unsuitable.
bool upload_kernel_suits(int device) {
    try {
        auto attr = [&](CUdevice_attribute a) { return device_attribute(device, a); };
        return attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) != 0 &&
               attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) != 0 &&
               attr(CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT) == 0 &&
               attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) >= 48;
    } catch (const std::exception&) {
        return false;
    }
}

// The stream of the upload kernel, at the device's highest priority so that its blocks get SMs
// as soon as running kernels free some; null when the kernel is off, does not suit the device or
// cannot be loaded (no cubin for this device and no NVRTC): uploads are then staged, as the C API
// allows.
StreamPtr pull_stream(int device) {
    if (!upload_kernel_enabled() || !upload_kernel_suits(device)) return nullptr;
    try {
        upload_kernel().get(device);  // loads it now, not under the engine's lock
    } catch (const std::exception&) {
        return nullptr;
    }
    return Stream::create(device, priority_range(device).second);
}

CopyStreams g_streams[kMaxDevices];

[[noreturn]] void transfer_failed(const char* what) {
    throw CudaError(CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN",
                    std::string(what) + ": " + rust_last_error());
}

// The device's copy streams, and its transfer engine configured with them (once).
CopyStreams& copy_streams(int device) {
    CopyStreams& s = g_streams[device];
    std::call_once(s.configured, [&] {
        StreamPtr h2d = Stream::create(device, 0);
        StreamPtr d2h = Stream::create(device, 0);
        StreamPtr pull = pull_stream(device);
        if (rust_api().transfer_configure(device, h2d->id(), d2h->id(), pull ? pull->id() : 0,
                                          kChunkBytes, kSlots) != PGK_OK) {
            transfer_failed("transfer_configure");
        }
        s.h2d = std::move(h2d);
        s.d2h = std::move(d2h);
        s.pull = std::move(pull);
    });
    return s;
}

// `waiter` waits for the work enqueued on `producer` so far.
void order_after(const Stream& waiter, const Stream& producer) {
    Event ready(producer.device(), false);
    ready.record(producer);
    waiter.wait_event(ready);
}

}  // namespace

CUresult launch_upload_pull(int device, CUstream stream, const pgk_pull_args& a) {
    CUfunction f = upload_kernel().get(device);
    CUresult r = drv().cuMemsetD32Async(a.counter, 0, 1, stream);
    if (r != CUDA_SUCCESS) return r;
    unsigned long long dst = a.dst, first_seq = a.first_seq, nbytes = a.nbytes,
                       chunk_bytes = a.chunk_bytes;
    void* ring = reinterpret_cast<void*>(a.ring);
    void* ready = reinterpret_cast<void*>(a.ready);
    void* freed = reinterpret_cast<void*>(a.freed);
    void* counter = reinterpret_cast<void*>(a.counter);
    unsigned slots = a.slots;
    void* args[] = {&dst,       &ring,   &ready,       &freed, &counter,
                    &first_seq, &nbytes, &chunk_bytes, &slots};
    return drv().cuLaunchKernel(f, a.ctas, 1, 1, kUploadThreads, 1, 1, 0, stream, args, nullptr);
}

void transfer_to_device(uint64_t dev, const void* host, uint64_t nbytes, const StreamPtr& stream) {
    const int device = stream->device();
    CopyStreams& copy = copy_streams(device);
    bind_device(device);  // the engine's copies run on this thread, in the device's context
    // The destination may be a block the pool just handed out on `stream`, still read by work
    // enqueued there before: the copy stream starts after it.
    order_after(*copy.h2d, *stream);
    const pgk_api& api = rust_api();
    uint64_t ticket = 0;
    pgk_status status;
    {
        GilRelease nogil;
        status = api.transfer_submit(device, PGK_HOST_TO_DEVICE, reinterpret_cast<uint64_t>(host),
                                     dev, nbytes, 0, &ticket);
    }
    if (status != PGK_OK) transfer_failed("transfer_submit");
    status = api.transfer_stream_wait(ticket, stream->id());
    api.transfer_release(ticket);
    if (status != PGK_OK) transfer_failed("transfer_stream_wait");
}

void order_download_after(const StreamPtr& stream) {
    order_after(*copy_streams(stream->device()).d2h, *stream);
}

void transfer_to_host(int device, void* host, uint64_t dev, uint64_t nbytes) {
    copy_streams(device);
    bind_device(device);  // as above; this may be a worker thread that never ran CUDA work
    const pgk_api& api = rust_api();
    uint64_t ticket = 0;
    // Returns once every chunk has landed in `host`.
    if (api.transfer_submit(device, PGK_DEVICE_TO_HOST, reinterpret_cast<uint64_t>(host), dev,
                            nbytes, 0, &ticket) != PGK_OK) {
        transfer_failed("transfer_submit");
    }
    api.transfer_release(ticket);
}

}  // namespace pgk
