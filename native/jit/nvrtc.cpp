#include "jit/nvrtc.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <mutex>
#include <stdexcept>

#include "core/dynlib.hpp"
#include "core/errors.hpp"

namespace pgk {

namespace {

#define PGK_NVRTC_FUNCTIONS(X) \
    X(nvrtcVersion)            \
    X(nvrtcGetErrorString)     \
    X(nvrtcCreateProgram)      \
    X(nvrtcDestroyProgram)     \
    X(nvrtcCompileProgram)     \
    X(nvrtcGetProgramLogSize)  \
    X(nvrtcGetProgramLog)      \
    X(nvrtcGetCUBINSize)       \
    X(nvrtcGetCUBIN)           \
    X(nvrtcAddNameExpression)  \
    X(nvrtcGetLoweredName)

struct NvrtcTable {
#define PGK_DECLARE_NVRTC_POINTER(name) decltype(&::name) name = nullptr;
    PGK_NVRTC_FUNCTIONS(PGK_DECLARE_NVRTC_POINTER)
#undef PGK_DECLARE_NVRTC_POINTER
};

std::mutex g_mutex;
NvrtcLoadResult g_result;
NvrtcTable g_table;
const NvrtcTable* g_nvrtc = nullptr;

const NvrtcTable& nvrtc() {
    if (g_nvrtc == nullptr) {
        throw std::runtime_error(
            "NVRTC JIT compiler not available: pip install \"pygpukit-runtime[jit]\" (the "
            "nvidia-cuda-nvrtc wheel) or set CUDA_PATH to a CUDA Toolkit");
    }
    return *g_nvrtc;
}

void check_nvrtc(nvrtcResult r, const char* what) {
    if (r != NVRTC_SUCCESS) {
        throw std::runtime_error(std::string(what) + ": " + nvrtc().nvrtcGetErrorString(r));
    }
}

// Destroys the program however compile() leaves.
class Program {
  public:
    explicit Program(nvrtcProgram p) : p_(p) {}
    ~Program() { nvrtc().nvrtcDestroyProgram(&p_); }
    nvrtcProgram get() const { return p_; }

  private:
    nvrtcProgram p_;
};

}  // namespace

NvrtcLoadResult load_nvrtc(const std::vector<std::string>& candidates) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_result.loaded) return g_result;
    LoadAttempt attempt = open_first(candidates, "nvrtcCompileProgram");
    NvrtcLoadResult result;
    result.tried = attempt.tried;
    if (attempt.handle != nullptr) {
        NvrtcTable table;
        bool complete = true;
#define PGK_RESOLVE_NVRTC(name)                                                        \
    table.name = reinterpret_cast<decltype(table.name)>(dlsym(attempt.handle, #name)); \
    complete = complete && table.name != nullptr;
        PGK_NVRTC_FUNCTIONS(PGK_RESOLVE_NVRTC)
#undef PGK_RESOLVE_NVRTC
        if (complete) {
            g_table = table;
            g_nvrtc = &g_table;
            result.loaded = true;
            result.path = attempt.path;
            g_table.nvrtcVersion(&result.major, &result.minor);
        } else {
            result.tried.emplace_back(attempt.path, "missing NVRTC entry points");
            dlclose(attempt.handle);
        }
    }
    g_result = result;
    return result;
}

bool nvrtc_loaded() { return g_nvrtc != nullptr; }

std::pair<int, int> nvrtc_version() {
    int major = 0, minor = 0;
    check_nvrtc(nvrtc().nvrtcVersion(&major, &minor), "nvrtcVersion");
    return {major, minor};
}

CompileResult nvrtc_compile(const std::string& source, const std::string& name,
                            const std::vector<std::string>& options,
                            const std::vector<std::string>& name_expressions) {
    const NvrtcTable& api = nvrtc();
    nvrtcProgram raw = nullptr;
    check_nvrtc(api.nvrtcCreateProgram(&raw, source.c_str(), name.c_str(), 0, nullptr, nullptr),
                "nvrtcCreateProgram");
    Program program(raw);
    for (const std::string& expr : name_expressions) {
        check_nvrtc(api.nvrtcAddNameExpression(raw, expr.c_str()), "nvrtcAddNameExpression");
    }
    std::vector<const char*> option_ptrs;
    option_ptrs.reserve(options.size());
    for (const std::string& o : options) option_ptrs.push_back(o.c_str());
    const nvrtcResult status =
        api.nvrtcCompileProgram(raw, static_cast<int>(option_ptrs.size()), option_ptrs.data());

    CompileResult result;
    size_t log_size = 0;
    check_nvrtc(api.nvrtcGetProgramLogSize(raw, &log_size), "nvrtcGetProgramLogSize");
    result.log.resize(log_size);
    if (log_size > 0) {
        check_nvrtc(api.nvrtcGetProgramLog(raw, &result.log[0]), "nvrtcGetProgramLog");
        while (!result.log.empty() && result.log.back() == '\0') result.log.pop_back();
    }
    if (status != NVRTC_SUCCESS) {
        // The log is the contract (CompileError(log)); NVRTC leaves it empty only for errors
        // that are not about the source, such as a bad option.
        throw CompileError(result.log.empty() ? name + ": " + api.nvrtcGetErrorString(status)
                                              : result.log);
    }
    size_t cubin_size = 0;
    check_nvrtc(api.nvrtcGetCUBINSize(raw, &cubin_size), "nvrtcGetCUBINSize");
    if (cubin_size == 0) {
        throw CompileError(name +
                           ": NVRTC produced no cubin; the target must be a real "
                           "architecture (--gpu-architecture=sm_XY), not compute_XY");
    }
    result.cubin.resize(cubin_size);
    check_nvrtc(api.nvrtcGetCUBIN(raw, &result.cubin[0]), "nvrtcGetCUBIN");
    for (const std::string& expr : name_expressions) {
        const char* lowered = nullptr;
        check_nvrtc(api.nvrtcGetLoweredName(raw, expr.c_str(), &lowered), "nvrtcGetLoweredName");
        result.lowered.emplace_back(expr, lowered);
    }
    return result;
}

}  // namespace pgk
