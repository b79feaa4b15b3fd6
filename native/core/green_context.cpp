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

// The device's SMs are split once, into as many equal groups as the driver makes (plus a
// remainder). The driver refuses to split the output of a split again (the remainder included:
// CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION), but a descriptor may combine any outputs of one
// split, so a partition of k groups is a green context over k free groups.
struct DeviceState {
    bool initialized = false;
    std::string unsupported;  // why the device cannot be partitioned, once known
    int total = 0;
    int group_sms = 0;  // SMs per group: the granularity of partitions
    std::vector<CUdevResource> groups;
    std::vector<bool> group_free;
    CUdevResource remainder{};       // SMs of no group (may be empty)
    bool remainder_combines = true;  // false once the driver refused it next to the groups
    // Leaked on purpose: contexts and streams live as long as the process (see the header).
    std::vector<GreenContext::Entry*> entries;

    int free_groups() const {
        return static_cast<int>(std::count(group_free.begin(), group_free.end(), true));
    }
    int unassigned_sms() const {
        const int rest = remainder_combines ? static_cast<int>(remainder.sm.smCount) : 0;
        return free_groups() * group_sms + rest;
    }
};

std::mutex& g_mutex = *new std::mutex;
auto& g_devices = *new std::map<int, DeviceState>;

bool symbols_present() {
    const DriverTable& d = drv();
    return d.cuDeviceGetDevResource && d.cuDevSmResourceSplitByCount &&
           d.cuDevResourceGenerateDesc && d.cuGreenCtxCreate && d.cuGreenCtxDestroy &&
           d.cuGreenCtxStreamCreate;
}

// The smallest group a split can produce: Hopper and later split in groups of 8 SMs, Ampere and
// Ada in groups of 2, unless the driver reports the sizes itself (CUDA 13 drivers do).
int min_group_of(int device, const CUdevResource& sms) {
    int reported =
        static_cast<int>(std::max(sms.sm.smCoscheduledAlignment, sms.sm.minSmPartitionSize));
    if (reported > 0) return reported;
    return compute_capability(device).first >= 9 ? 8 : 2;
}

// "CUDA_ERROR_X (code)" for a reason string.
std::string error_string(CUresult r) {
    const char* name = nullptr;
    if (drv().cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA error";
    return std::string(name) + " (" + std::to_string(static_cast<int>(r)) + ")";
}

CUdevice device_handle(int device) {
    CUdevice dev = 0;
    check(drv().cuDeviceGet(&dev, device), "cuDeviceGet");
    return dev;
}

// Splits the device's SMs into groups of the smallest size the driver accepts: first keeping
// SMs co-scheduled (thread block clusters keep working), else ignoring co-scheduling. Returns
// the reason when no split works; the device is then not partitioned at all.
std::string split_device(DeviceState& st, int device, const CUdevResource& all) {
    const unsigned int sizes[] = {static_cast<unsigned int>(min_group_of(device, all)), 8u, 2u};
    const unsigned int flags[] = {0u, CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING};
    std::string why = "the driver split no group out of " + std::to_string(st.total) + " SMs";
    for (unsigned int flag : flags) {
        for (unsigned int size : sizes) {
            if (size == 0 || size > all.sm.smCount) continue;
            // A query first: how many groups this split makes. A driver that cannot answer gets
            // room for every group the SM count allows (the split reports how many it made).
            unsigned int n = 0;
            CUresult r = drv().cuDevSmResourceSplitByCount(nullptr, &n, &all, nullptr, flag, size);
            if (r != CUDA_SUCCESS || n == 0) n = all.sm.smCount / size;
            std::vector<CUdevResource> groups(n);
            CUdevResource rest{};
            r = drv().cuDevSmResourceSplitByCount(groups.data(), &n, &all, &rest, flag, size);
            if (r != CUDA_SUCCESS || n == 0) {
                why = "cuDevSmResourceSplitByCount(minCount=" + std::to_string(size) +
                      ", flags=" + std::to_string(flag) + ") failed: " + error_string(r);
                continue;
            }
            groups.resize(n);
            st.groups = std::move(groups);
            st.group_free.assign(n, true);
            st.group_sms = static_cast<int>(st.groups[0].sm.smCount);
            st.remainder = rest;
            return "";
        }
    }
    return why;
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
        st.initialized = true;
        bind_device(device);
        CUdevResource res{};
        CUresult r =
            drv().cuDeviceGetDevResource(device_handle(device), &res, CU_DEV_RESOURCE_TYPE_SM);
        if (r != CUDA_SUCCESS || res.sm.smCount == 0) {
            st.unsupported = "the driver reports no SM resource for this device";
        } else {
            st.total = static_cast<int>(res.sm.smCount);
            st.unsupported = split_device(st, device, res);
        }
    }
    if (!st.unsupported.empty()) {
        *why = st.unsupported;
        return nullptr;
    }
    return &st;
}

// A green context over `resources` (outputs of the device's one split); registered in `st`.
GreenContext::Entry* make_entry(DeviceState& st, int device, std::vector<CUdevResource> resources) {
    CUdevResourceDesc desc = nullptr;
    check(drv().cuDevResourceGenerateDesc(&desc, resources.data(),
                                          static_cast<unsigned int>(resources.size())),
          "cuDevResourceGenerateDesc");
    auto* e = new GreenContext::Entry;
    CUresult r =
        drv().cuGreenCtxCreate(&e->ctx, desc, device_handle(device), CU_GREEN_CTX_DEFAULT_STREAM);
    if (r != CUDA_SUCCESS) {
        delete e;
        throw_cuda_error(r, "cuGreenCtxCreate");
    }
    int sms = 0;
    for (const CUdevResource& res : resources) sms += static_cast<int>(res.sm.smCount);
    e->sm_count = sms;
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
    s.granularity = st->group_sms;
    s.unassigned = st->unassigned_sms();
    return s;
}

std::shared_ptr<GreenContext> GreenContext::acquire(int device, int sm_count) {
    if (sm_count <= 0) throw std::invalid_argument("a green context needs at least one SM");
    std::lock_guard<std::mutex> lock(g_mutex);
    std::string why;
    DeviceState* st = state_of(device, &why);
    if (st == nullptr) throw std::runtime_error("no green contexts: " + why);
    // Round down to whole groups (never more than the partition reserved, so the shares the Rust
    // core admitted always fit together), at least one group. The best fit is a released context
    // of that size; else new groups (at most the free ones); else the largest released context
    // that is not larger.
    const int desired = std::max(1, sm_count / st->group_sms) * st->group_sms;
    Entry* reuse = nullptr;
    for (Entry* e : st->entries) {
        if (e->in_use || e->whole_rest || e->sm_count > desired) continue;
        if (reuse == nullptr || e->sm_count > reuse->sm_count) reuse = e;
    }
    const int want_groups = std::min(desired / st->group_sms, st->free_groups());
    if (reuse != nullptr && reuse->sm_count >= want_groups * st->group_sms) {
        reuse->in_use = true;
        return std::make_shared<GreenContext>(device, reuse->sm_count, reuse);
    }
    if (want_groups < 1) {
        throw std::runtime_error("no green context of " + std::to_string(sm_count) + " SMs: only " +
                                 std::to_string(st->unassigned_sms()) +
                                 " SMs are not held by other green contexts (groups of " +
                                 std::to_string(st->group_sms) + ")");
    }
    std::vector<CUdevResource> picked;
    std::vector<size_t> picked_index;
    for (size_t i = 0; i < st->groups.size() && static_cast<int>(picked.size()) < want_groups;
         ++i) {
        if (st->group_free[i]) {
            picked.push_back(st->groups[i]);
            picked_index.push_back(i);
        }
    }
    Entry* e = make_entry(*st, device, picked);
    for (size_t i : picked_index) st->group_free[i] = false;
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
    const int free_sms = st->unassigned_sms();
    if (st->free_groups() == static_cast<int>(st->groups.size()) || free_sms == 0) return nullptr;
    for (Entry* e : st->entries) {
        if (e->whole_rest && !e->in_use) {
            // Shared by every partition without a share: not marked in use.
            return std::make_shared<GreenContext>(device, e->sm_count, e);
        }
    }
    std::vector<CUdevResource> rest;
    for (size_t i = 0; i < st->groups.size(); ++i) {
        if (st->group_free[i]) rest.push_back(st->groups[i]);
    }
    Entry* e = nullptr;
    if (st->remainder.sm.smCount > 0 && st->remainder_combines) {
        // The remainder may not combine with the groups (a different co-scheduling alignment):
        // then the rest is the free groups alone.
        std::vector<CUdevResource> with_remainder = rest;
        with_remainder.push_back(st->remainder);
        try {
            e = make_entry(*st, device, with_remainder);
        } catch (const CudaError&) {
            st->remainder_combines = false;
            if (rest.empty()) throw;
        }
    }
    if (e == nullptr) e = make_entry(*st, device, rest);
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
