#include "core/pinned_staging.hpp"

#include <mutex>
#include <vector>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/stream.hpp"

namespace pgk {

namespace {

struct Slot {
    void* ptr = nullptr;
    uint64_t size = 0;
    CUevent event = nullptr;  // recorded after the last copy; in event_device's context
    int event_device = -1;
    bool leased = false;
};

std::mutex g_mutex;
std::vector<Slot> g_slots;

bool idle(const Slot& s) {
    if (s.leased) return false;
    if (s.event == nullptr) return true;
    return drv().cuEventQuery(s.event) == CUDA_SUCCESS;
}

}  // namespace

StagingLease staging_acquire(uint64_t nbytes) {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (size_t i = 0; i < g_slots.size(); ++i) {
        if (g_slots[i].size >= nbytes && idle(g_slots[i])) {
            g_slots[i].leased = true;
            return StagingLease{g_slots[i].ptr, i};
        }
    }
    uint64_t size = 1 << 16;
    while (size < nbytes) size <<= 1;
    Slot slot;
    bind_device(get_device());
    check(drv().cuMemHostAlloc(&slot.ptr, size, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
    slot.size = size;
    slot.leased = true;
    g_slots.push_back(slot);
    return StagingLease{slot.ptr, g_slots.size() - 1};
}

void staging_release(const StagingLease& lease, const Stream& stream) {
    std::lock_guard<std::mutex> lock(g_mutex);
    Slot& slot = g_slots[lease.slot];
    slot.leased = false;
    if (slot.event_device != stream.device()) {
        bind_device(stream.device());
        if (slot.event != nullptr) drv().cuEventDestroy(slot.event);
        slot.event = nullptr;
        check(drv().cuEventCreate(&slot.event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
        slot.event_device = stream.device();
    }
    check(drv().cuEventRecord(slot.event, stream.handle()), "cuEventRecord");
}

}  // namespace pgk
