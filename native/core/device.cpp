#include "core/device.hpp"

#include <array>
#include <mutex>
#include <stdexcept>

#include "core/driver.hpp"
#include "core/stream.hpp"

namespace pgk {

namespace {

std::mutex g_context_mutex;
std::array<CUcontext, kMaxDevices> g_contexts{};
std::array<std::pair<int, int>, kMaxDevices> g_capability{};
thread_local int t_current_device = 0;

CUcontext primary_context(int device) {
    CUcontext ctx = g_contexts[device];
    if (ctx != nullptr) return ctx;
    std::lock_guard<std::mutex> lock(g_context_mutex);
    if (g_contexts[device] == nullptr) {
        check_device_ordinal(device);
        CUdevice dev;
        check(drv().cuDeviceGet(&dev, device), "cuDeviceGet");
        // Retained once and never released: the context lives as long as the process.
        check(drv().cuDevicePrimaryCtxRetain(&g_contexts[device], dev), "cuDevicePrimaryCtxRetain");
    }
    return g_contexts[device];
}

int attribute(CUdevice dev, CUdevice_attribute attr) {
    int value = 0;
    check(drv().cuDeviceGetAttribute(&value, attr, dev), "cuDeviceGetAttribute");
    return value;
}

}  // namespace

int device_count() {
    int count = 0;
    check(drv().cuDeviceGetCount(&count), "cuDeviceGetCount");
    return count;
}

void check_device_ordinal(int device) {
    static int count = -1;  // device count does not change while the process runs
    if (count < 0) count = device_count();
    if (device < 0 || device >= count || device >= kMaxDevices) {
        throw std::out_of_range("device " + std::to_string(device) + " out of range (" +
                                std::to_string(count) + " devices)");
    }
}

void bind_device(int device) {
    CUcontext want = primary_context(device);
    CUcontext current = nullptr;
    // Another library on this thread may have switched the context: ask the driver, not a cache.
    check(drv().cuCtxGetCurrent(&current), "cuCtxGetCurrent");
    if (current != want) check(drv().cuCtxSetCurrent(want), "cuCtxSetCurrent");
}

void set_device(int device) {
    bind_device(device);
    t_current_device = device;
}

int get_device() { return t_current_device; }

void synchronize_device(int device) {
    ensure_not_capturing(nullptr, "synchronize");
    bind_device(device);
    check(drv().cuCtxSynchronize(), "cuCtxSynchronize");
}

int device_attribute(int device, CUdevice_attribute attr) {
    check_device_ordinal(device);
    CUdevice dev;
    check(drv().cuDeviceGet(&dev, device), "cuDeviceGet");
    return attribute(dev, attr);
}

std::pair<int, int> compute_capability(int device) {
    check_device_ordinal(device);
    if (g_capability[device].first == 0) {
        CUdevice dev;
        check(drv().cuDeviceGet(&dev, device), "cuDeviceGet");
        g_capability[device] = {attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                                attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)};
    }
    return g_capability[device];
}

std::string target_arch(int device) {
    auto [major, minor] = compute_capability(device);
    std::string arch = "sm_" + std::to_string(major) + std::to_string(minor);
    // The arch-specific ('a') targets exist for 9.0, 10.x and 12.x; they unlock wgmma/tcgen05.
    if (major == 9 || major == 10 || major == 12) arch += "a";
    return arch;
}

DeviceInfo device_info(int device) {
    check_device_ordinal(device);
    CUdevice dev;
    check(drv().cuDeviceGet(&dev, device), "cuDeviceGet");
    DeviceInfo info;
    char name[256] = {0};
    check(drv().cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
    info.name = name;
    std::tie(info.sm_major, info.sm_minor) = compute_capability(device);
    info.sm_count = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    size_t total = 0;
    check(drv().cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
    info.total_memory = total;
    info.l2_cache_bytes = attribute(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    info.shared_mem_per_block = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    info.shared_mem_per_block_optin =
        attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    info.shared_mem_per_sm =
        attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    info.clock_khz = attribute(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    info.memory_clock_khz = attribute(dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    info.memory_bus_width = attribute(dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    check(drv().cuDriverGetVersion(&info.driver_version), "cuDriverGetVersion");
    char bus_id[64] = {0};
    check(drv().cuDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, dev), "cuDeviceGetPCIBusId");
    info.pci_bus_id = bus_id;
    return info;
}

}  // namespace pgk
