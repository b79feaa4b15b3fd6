#include "core/event.hpp"

#include <stdexcept>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/stream.hpp"

namespace pgk {

Event::Event(int device, bool timing) : device_(device), timing_(timing) {
    bind_device(device);
    check(drv().cuEventCreate(&handle_, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING),
          "cuEventCreate");
}

Event::~Event() {
    if (handle_ != nullptr && driver_loaded()) drv().cuEventDestroy(handle_);
}

void Event::record(const Stream& stream) {
    if (stream.device() != device_) {
        throw std::invalid_argument("Event.record: the event belongs to device " +
                                    std::to_string(device_) + ", the stream to device " +
                                    std::to_string(stream.device()));
    }
    check(drv().cuEventRecord(handle_, stream.handle()), "cuEventRecord");
}

bool Event::query() const {
    CUresult r = drv().cuEventQuery(handle_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuEventQuery");
    return true;
}

void Event::synchronize() const {
    ensure_not_capturing(nullptr, "Event.synchronize");
    check(drv().cuEventSynchronize(handle_), "cuEventSynchronize");
}

float Event::elapsed_time(const Event& end) const {
    if (!timing_ || !end.timing_) {
        throw std::invalid_argument("elapsed_time needs two events created with timing=True");
    }
    float ms = 0.0f;
    check(drv().cuEventElapsedTime(&ms, handle_, end.handle_), "cuEventElapsedTime");
    return ms;
}

}  // namespace pgk
