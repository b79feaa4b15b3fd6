// Green contexts: SM partitions of one device (CUDA 12.4+ drivers). A partition with a compute
// share gets a green context holding its SMs, and its streams are created in it, so its kernels
// run on those SMs only and other work cannot take them.
//
// The device's SMs are split once into equal groups (8 SMs on Hopper; the driver cannot split a
// split's output again); a green context combines free groups, so two never share SMs. A device
// the driver cannot split reports supported = false with the reason (callers fall back). Green
// contexts and their streams live for the whole process (arrays and the memory pool may refer to a
// stream after its partition is gone); a released context is reused by the next request for the
// same SM count.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/stream.hpp"

namespace pgk {

struct GreenContextSupport {
    bool supported = false;
    std::string reason;   // why not, when not supported
    int sm_count = 0;     // SMs of the device
    int granularity = 0;  // SMs per group: partition SM counts are multiples of this
    int unassigned = 0;   // SMs no green context holds yet
};

// Whether `device` can be partitioned: the driver exports every entry point and reports the
// device's SMs. Never throws for a missing driver feature.
GreenContextSupport green_context_support(int device);

class GreenContext {
  public:
    // A green context of `sm_count` SMs rounded down to the split granularity (at least one
    // granule) taken from the device's unassigned SMs, or a released one of the same count.
    // Throws std::runtime_error when unsupported or too few SMs are left (the caller falls back to
    // stream priorities), CudaError for driver failures.
    static std::shared_ptr<GreenContext> acquire(int device, int sm_count);
    // A green context over every SM still unassigned (work without a share), or nullptr when no
    // SMs have been assigned (the whole device is then the better choice) or none are left.
    static std::shared_ptr<GreenContext> unassigned(int device);

    int device() const { return device_; }
    int sm_count() const { return sm_count_; }
    // A non-blocking stream in this green context with CUDA stream `priority` (one per priority,
    // reused); wrapped like a foreign stream: never destroyed.
    StreamPtr stream(int priority);
    // Gives the context back for reuse; its streams must have no more work enqueued by the caller.
    void release();

    struct Entry;  // registry record (green_context.cpp)
    GreenContext(int device, int sm_count, Entry* entry)
        : device_(device), sm_count_(sm_count), entry_(entry) {}

  private:
    int device_;
    int sm_count_;
    Entry* entry_;
};

using GreenContextPtr = std::shared_ptr<GreenContext>;

}  // namespace pgk
