// The runtime's built-in kernels (native/kernels/*.cu): a typed registry of entry points that
// load lazily per device from the wheel's per-SM cubins, or are JIT-compiled from the shipped
// sources with the manifest's options when no cubin fits and NVRTC is loaded.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <string>
#include <vector>

#include "core/device.hpp"

namespace pgk {

// Where the built-in kernels live (pygpukit/_kernels) and how they were compiled. NVRTC is
// loaded from `nvrtc_candidates` only when a device has no fitting cubin.
void set_kernel_dir(const std::string& path, const std::vector<std::string>& options,
                    const std::vector<std::string>& include_dirs,
                    const std::vector<std::string>& nvrtc_candidates);

// One entry point of one kernel file, e.g. BuiltinKernel("fill", "fill_u32"). Define them as
// statics next to the op that launches them; get() is a relaxed atomic load after the first call.
class BuiltinKernel {
  public:
    BuiltinKernel(std::string module, std::string name)
        : module_(std::move(module)), name_(std::move(name)) {}
    CUfunction get(int device) const {
        CUfunction f = functions_[device].load(std::memory_order_acquire);
        return f != nullptr ? f : load(device);
    }

  private:
    CUfunction load(int device) const;
    std::string module_;
    std::string name_;
    mutable std::array<std::atomic<CUfunction>, kMaxDevices> functions_{};
};

// The cubin folder chosen for a device among those available (exposed for tests and `info`):
// exact SM (its 'a' variant first), else the same major with the highest lower minor (no 'a').
// Empty when none fits.
std::string choose_cubin_arch(int major, int minor, const std::vector<std::string>& available);

}  // namespace pgk
