// CUDA events: ordering between streams and timing.
#pragma once

#include <cuda.h>

#include <memory>

namespace pgk {

class Stream;

class Event {
  public:
    Event(int device, bool timing);
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    CUevent handle() const { return handle_; }
    int device() const { return device_; }
    bool timing() const { return timing_; }

    void record(const Stream& stream);
    bool query() const;
    void synchronize() const;  // blocks; the caller releases the GIL
    // Milliseconds from this event to `end`; both recorded with timing enabled.
    float elapsed_time(const Event& end) const;

  private:
    CUevent handle_ = nullptr;
    int device_;
    bool timing_;
};

}  // namespace pgk
