// NVRTC, opened with dlopen from the candidates pygpukit._environment lists (the
// nvidia-cuda-nvrtc wheel, CUDA_PATH, the system). Optional: without it, user kernels cannot be
// compiled and built-in kernels must come from shipped cubins.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace pgk {

struct NvrtcLoadResult {
    bool loaded = false;
    std::string path;
    std::vector<std::pair<std::string, std::string>> tried;
    int major = 0, minor = 0;
};

NvrtcLoadResult load_nvrtc(const std::vector<std::string>& candidates);
bool nvrtc_loaded();
std::pair<int, int> nvrtc_version();  // throws std::runtime_error when NVRTC is not loaded

struct CompileResult {
    std::string cubin;
    std::string log;
    std::vector<std::pair<std::string, std::string>> lowered;  // name expression -> mangled name
};

// Compile `source` to a cubin. `options` must name the target (--gpu-architecture=sm_XY), which
// must be a real SM so that NVRTC emits SASS. Throws CompileError(log) when NVRTC rejects the
// source. Does not touch Python: callers release the GIL around it.
CompileResult nvrtc_compile(const std::string& source, const std::string& name,
                            const std::vector<std::string>& options,
                            const std::vector<std::string>& name_expressions);

}  // namespace pgk
