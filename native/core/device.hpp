// Devices and their primary contexts. Each device's primary context is retained once, on first
// use, and kept for the life of the process (so the driver, PyTorch and CuPy share it). The
// current device is thread-local, like CUDA's.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

namespace pgk {

constexpr int kMaxDevices = 64;

int device_count();
// Throws std::out_of_range (IndexError in Python) for an ordinal not in [0, device_count()).
void check_device_ordinal(int device);

// Make `device`'s primary context current on this thread (cheap when it already is).
void bind_device(int device);

void set_device(int device);  // thread-local current device, its context made current
int get_device();             // thread-local, 0 until set

// Blocks (GIL released by the caller) until all work on the device is done.
void synchronize_device(int device);

struct DeviceInfo {
    std::string name;
    int sm_major = 0, sm_minor = 0;
    int sm_count = 0;
    uint64_t total_memory = 0;
    int l2_cache_bytes = 0;
    int shared_mem_per_block = 0, shared_mem_per_block_optin = 0, shared_mem_per_sm = 0;
    int clock_khz = 0, memory_clock_khz = 0, memory_bus_width = 0;
    int driver_version = 0;
    std::string pci_bus_id;
};
DeviceInfo device_info(int device);

// One cuDeviceGetAttribute of `device`; throws CudaError when the query fails.
int device_attribute(int device, CUdevice_attribute attr);

// (major, minor) compute capability, cached per device.
std::pair<int, int> compute_capability(int device);
// NVRTC target of the device's exact architecture: "sm_90a" on Hopper (wgmma, setmaxnreg),
// "sm_100a" / "sm_120a" on Blackwell, "sm_XY" elsewhere.
std::string target_arch(int device);

}  // namespace pgk
