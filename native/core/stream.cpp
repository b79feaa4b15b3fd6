#include "core/stream.hpp"

#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/errors.hpp"
#include "core/event.hpp"

namespace pgk {

namespace {

std::mutex g_default_mutex;
// Owned CUstreams are recycled, never destroyed: the Rust pool keeps the handle of the stream a
// block was freed on and may record fence events on it later (pool_alloc on another stream), so a
// handle must stay valid for the life of the process. Idle handles, keyed by (device, priority),
// are handed to the next Stream created with that key; the set only grows to the largest number
// of streams alive at once.
// Leaked on purpose: streams may be recycled from destructors that run during interpreter exit.
std::mutex& idle_mutex = *new std::mutex;
auto& idle_streams = *new std::map<std::pair<int, int>, std::vector<CUstream>>;
// Owned by the runtime for the life of the process (deliberately never destroyed: streams must
// not be torn down after the driver at interpreter exit).
std::array<StreamPtr*, kMaxDevices> g_default_streams{};
thread_local std::array<StreamPtr, kMaxDevices> t_current_streams;
thread_local int t_active_captures = 0;

}  // namespace

StreamPtr Stream::create(int device, int priority) {
    bind_device(device);
    {
        std::lock_guard<std::mutex> lock(idle_mutex);
        std::vector<CUstream>& idle = idle_streams[{device, priority}];
        if (!idle.empty()) {
            CUstream handle = idle.back();
            idle.pop_back();
            return StreamPtr(new Stream(handle, device, priority, true));
        }
    }
    CUstream handle = nullptr;
    check(drv().cuStreamCreateWithPriority(&handle, CU_STREAM_NON_BLOCKING, priority),
          "cuStreamCreateWithPriority");
    return StreamPtr(new Stream(handle, device, priority, true));
}

StreamPtr Stream::wrap(CUstream handle, int device) {
    check_device_ordinal(device);
    return StreamPtr(new Stream(handle, device, 0, false));
}

Stream::~Stream() {
    if (!owned_) return;
    std::lock_guard<std::mutex> lock(idle_mutex);
    idle_streams[{device_, requested_priority_}].push_back(handle_);
}

std::shared_ptr<void> Stream::scratch() const {
    std::lock_guard<std::mutex> lock(scratch_mutex_);
    return scratch_;
}

std::shared_ptr<void> Stream::keep_scratch(std::shared_ptr<void> value) const {
    std::lock_guard<std::mutex> lock(scratch_mutex_);
    if (!scratch_) scratch_ = std::move(value);
    return scratch_;
}

int Stream::priority() const {
    int priority = 0;
    check(drv().cuStreamGetPriority(handle_, &priority), "cuStreamGetPriority");
    return priority;
}

void Stream::synchronize() const {
    ensure_not_capturing(handle_, "Stream.synchronize");
    check(drv().cuStreamSynchronize(handle_), "cuStreamSynchronize");
}

bool Stream::query() const {
    CUresult r = drv().cuStreamQuery(handle_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuStreamQuery");
    return true;
}

void Stream::wait_event(const Event& event) const {
    check(drv().cuStreamWaitEvent(handle_, event.handle(), 0), "cuStreamWaitEvent");
}

StreamPtr default_stream(int device) {
    check_device_ordinal(device);
    if (g_default_streams[device] == nullptr) {
        std::lock_guard<std::mutex> lock(g_default_mutex);
        if (g_default_streams[device] == nullptr) {
            g_default_streams[device] = new StreamPtr(Stream::create(device, 0));
        }
    }
    return *g_default_streams[device];
}

StreamPtr current_stream(int device) {
    check_device_ordinal(device);
    const StreamPtr& current = t_current_streams[device];
    return current ? current : default_stream(device);
}

StreamPtr current_stream() { return current_stream(get_device()); }

void set_current_stream(const StreamPtr& stream, int device) {
    if (stream) {
        t_current_streams[stream->device()] = stream;
    } else {
        check_device_ordinal(device);
        t_current_streams[device].reset();
    }
}

std::pair<int, int> priority_range(int device) {
    bind_device(device);
    int least = 0, greatest = 0;
    check(drv().cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange");
    return {least, greatest};
}

void ensure_not_capturing(CUstream stream, const char* what) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (stream != nullptr) {
        check(drv().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
    }
    if (t_active_captures > 0 || status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        throw CudaError(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
                        std::string(what) +
                            " waits for the GPU, which is not allowed while a CUDA graph is being "
                            "captured; end the capture first (the capture is still valid)");
    }
}

void note_capture_started() { ++t_active_captures; }
void note_capture_ended() { --t_active_captures; }

}  // namespace pgk
