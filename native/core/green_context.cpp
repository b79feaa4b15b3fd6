#include "core/green_context.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/errors.hpp"

namespace pgk {

struct GreenContext::Entry {
    CUgreenCtx ctx = nullptr;
    int sm_count = 0;
    bool in_use = false;
    bool whole_rest = false;  // made by unassigned(): valid only while nothing more is carved
    std::map<int, CUstream> streams;  // by priority
};

namespace {

struct DeviceState {
    bool initialized = false;
    CUdevResource unassigned{};  // SMs no green context holds
    int total = 0;
    // Leaked on purpose: contexts and streams live as long as the process (see the header).
    std::vector<GreenContext::Entry*> entries;
};

std::mutex& g_mutex = *new std::mutex;
auto& g_devices = *new std::map<int, DeviceState>;

bool symbols_present() {
    const DriverTable& d = drv();
    return d.cuDeviceGetDevResource && d.cuDevSmResourceSplitByCount &&
           d.cuDevResourceGenerateDesc && d.cuGreenCtxCreate && d.cuGreenCtxDestroy &&
           d.cuGreenCtxStreamCreate;
}

// The SM count a split can produce: Hopper and later split in groups of 8 SMs, Ampere and Ada
// in groups of 2, unless the driver reports the alignment itself.
int granularity_of(int device, const CUdevResource& sms) {
    int reported =
        static_cast<int>(std::max(sms.sm.smCoscheduledAlignment, sms.sm.minSmPartitionSize));
    if (reported > 0) return reported;
    return compute_capability(device).first >= 9 ? 8 : 2;
}

// Caller holds g_mutex. Returns nullptr with `why` set when the device cannot be partitioned.
DeviceState* state_of(int device, std::string* why) {
    if (!driver_loaded()) {
        *why = "the CUDA driver is not loaded";
        return nullptr;
    }
    if (!symbols_present()) {
        *why = "the driver has no green contexts (needs CUDA 12.5 or newer)";
        return nullptr;
    }
    DeviceState& st = g_devices[device];
    if (!st.initialized) {
        bind_device(device);
        CUdevice dev = 0;
        check(drv().cuDeviceGet(&dev, device), "cuDeviceGet");
        CUdevResource res{};
        CUresult r = drv().cuDeviceGetDevResource(dev, &res, CU_DEV_RESOURCE_TYPE_SM);
        if (r != CUDA_SUCCESS || res.sm.smCount == 0) {
            *why = "the driver reports no SM resource for this device";
            return nullptr;
        }
        st.unassigned = res;
        st.total = static_cast<int>(res.sm.smCount);
        st.initialized = true;
    }
    return &st;
}

CUdevice device_handle(int device) {
    CUdevice dev = 0;
    check(drv().cuDeviceGet(&dev, device), "cuDeviceGet");
    return dev;
}

// A green context over `resource`; registered in `st`.
GreenContext::Entry* make_entry(DeviceState& st, int device, CUdevResource resource) {
    CUdevResourceDesc desc = nullptr;
    check(drv().cuDevResourceGenerateDesc(&desc, &resource, 1), "cuDevResourceGenerateDesc");
    auto* e = new GreenContext::Entry;
    CUresult r =
        drv().cuGreenCtxCreate(&e->ctx, desc, device_handle(device), CU_GREEN_CTX_DEFAULT_STREAM);
    if (r != CUDA_SUCCESS) {
        delete e;
        throw_cuda_error(r, "cuGreenCtxCreate");
    }
    e->sm_count = static_cast<int>(resource.sm.smCount);
    st.entries.push_back(e);
    return e;
}

}  // namespace

GreenContextSupport green_context_support(int device) {
    GreenContextSupport s;
    std::lock_guard<std::mutex> lock(g_mutex);
    DeviceState* st = state_of(device, &s.reason);
    if (st == nullptr) return s;
    s.supported = true;
    s.sm_count = st->total;
    s.granularity = granularity_of(device, st->unassigned);
    s.unassigned = static_cast<int>(st->unassigned.sm.smCount);
    return s;
}

std::shared_ptr<GreenContext> GreenContext::acquire(int device, int sm_count) {
    if (sm_count <= 0) throw std::invalid_argument("a green context needs at least one SM");
    std::lock_guard<std::mutex> lock(g_mutex);
    std::string why;
    DeviceState* st = state_of(device, &why);
    if (st == nullptr) throw std::runtime_error("no green contexts: " + why);
    const int granule = granularity_of(device, st->unassigned);
    const int free_sms = static_cast<int>(st->unassigned.sm.smCount);
    // Round down to the granule (never more than the partition reserved, so the shares the Rust
    // core admitted always fit together), at least one granule, at most what is left.
    int want = std::max(granule, sm_count / granule * granule);
    want = std::min(want, free_sms / granule * granule);
    for (Entry* e : st->entries) {
        if (!e->in_use && !e->whole_rest && e->sm_count == want) {
            e->in_use = true;
            return std::make_shared<GreenContext>(device, e->sm_count, e);
        }
    }
    if (want < granule) {
        throw std::runtime_error("no green context of " + std::to_string(sm_count) + " SMs: only " +
                                 std::to_string(free_sms) +
                                 " SMs are not held by other green contexts");
    }
    CUdevResource group{}, rest{};
    unsigned int groups = 1;
    check(drv().cuDevSmResourceSplitByCount(&group, &groups, &st->unassigned, &rest, 0,
                                            static_cast<unsigned int>(want)),
          "cuDevSmResourceSplitByCount");
    if (groups < 1) {
        throw std::runtime_error("the driver could not split " + std::to_string(want) +
                                 " SMs from the " + std::to_string(free_sms) + " left");
    }
    Entry* e = make_entry(*st, device, group);
    st->unassigned = rest;
    // Contexts over "the rest" no longer describe the rest: never hand them out again.
    for (Entry* other : st->entries) {
        if (other->whole_rest) other->in_use = true;
    }
    e->in_use = true;
    return std::make_shared<GreenContext>(device, e->sm_count, e);
}

std::shared_ptr<GreenContext> GreenContext::unassigned(int device) {
    std::lock_guard<std::mutex> lock(g_mutex);
    std::string why;
    DeviceState* st = state_of(device, &why);
    if (st == nullptr) return nullptr;
    const int free_sms = static_cast<int>(st->unassigned.sm.smCount);
    if (free_sms == st->total || free_sms == 0) return nullptr;
    for (Entry* e : st->entries) {
        if (e->whole_rest && !e->in_use && e->sm_count == free_sms) {
            // Shared by every partition without a share: not marked in use.
            return std::make_shared<GreenContext>(device, e->sm_count, e);
        }
    }
    Entry* e = make_entry(*st, device, st->unassigned);
    e->whole_rest = true;
    return std::make_shared<GreenContext>(device, e->sm_count, e);
}

StreamPtr GreenContext::stream(int priority) {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = entry_->streams.find(priority);
    if (it == entry_->streams.end()) {
        bind_device(device_);
        CUstream handle = nullptr;
        check(drv().cuGreenCtxStreamCreate(&handle, entry_->ctx, CU_STREAM_NON_BLOCKING, priority),
              "cuGreenCtxStreamCreate");
        it = entry_->streams.emplace(priority, handle).first;
    }
    return Stream::wrap(it->second, device_);
}

void GreenContext::release() {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!entry_->whole_rest) entry_->in_use = false;
}

}  // namespace pgk
