#include "core/driver.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <mutex>

#include "core/dynlib.hpp"
#include "core/errors.hpp"

namespace pgk {

const DriverTable* g_driver = nullptr;

namespace {

std::mutex g_load_mutex;
DriverLoadResult g_load_result;
DriverTable g_table;

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

// Resolve every table entry through cuGetProcAddress at the ABI version it is typed with (a
// driver older than that version lacks the symbol: reported as such).
bool resolve_table(void* handle, int driver_version, std::string* error) {
    auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
    if (get_proc == nullptr) {
        *error = "cuGetProcAddress_v2 missing (driver older than CUDA 12)";
        return false;
    }
    DriverTable table;
#define PGK_RESOLVE(name, version)                                                                 \
    {                                                                                              \
        void* fn = nullptr;                                                                        \
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;              \
        if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || \
            fn == nullptr) {                                                                       \
            *error = "driver " + std::to_string(driver_version) + " lacks " #name;                 \
            return false;                                                                          \
        }                                                                                          \
        table.name = reinterpret_cast<decltype(table.name)>(fn);                                   \
    }
    PGK_DRIVER_FUNCTIONS(PGK_RESOLVE)
#undef PGK_RESOLVE
#define PGK_RESOLVE_OPTIONAL(name, version)                                                      \
    {                                                                                            \
        void* fn = nullptr;                                                                      \
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;            \
        if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS) \
            table.name = reinterpret_cast<decltype(table.name)>(fn);                             \
    }
    PGK_DRIVER_OPTIONAL_FUNCTIONS(PGK_RESOLVE_OPTIONAL)
#undef PGK_RESOLVE_OPTIONAL
    g_table = table;
    return true;
}

}  // namespace

DriverLoadResult load_driver(const std::vector<std::string>& candidates) {
    std::lock_guard<std::mutex> lock(g_load_mutex);
    if (g_load_result.loaded) return g_load_result;
    DriverLoadResult result;
    std::vector<std::string> remaining = candidates;
    while (!remaining.empty()) {
        LoadAttempt attempt = open_first(remaining, "cuDriverGetVersion");
        result.tried.insert(result.tried.end(), attempt.tried.begin(), attempt.tried.end());
        if (attempt.handle == nullptr) break;
        auto get_version =
            reinterpret_cast<CUresult (*)(int*)>(dlsym(attempt.handle, "cuDriverGetVersion"));
        int version = 0;
        std::string error;
        if (get_version(&version) == CUDA_SUCCESS &&
            resolve_table(attempt.handle, version, &error)) {
            result.loaded = true;
            result.path = attempt.path;
            result.driver_version = version;
            g_driver = &g_table;
            break;
        }
        result.tried.emplace_back(attempt.path,
                                  error.empty() ? "cuDriverGetVersion failed" : error);
        dlclose(attempt.handle);
        // Keep trying the candidates after the one that opened but did not resolve.
        auto it = std::find(remaining.begin(), remaining.end(), attempt.path);
        remaining.erase(remaining.begin(), it + 1);
    }
    g_load_result = result;
    return result;
}

bool driver_loaded() { return g_driver != nullptr; }

void init_driver() { check(drv().cuInit(0), "cuInit"); }

void throw_driver_not_loaded() {
    throw CudaError(CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
                    "CUDA driver not detected (libcuda.so.1 was not loaded)");
}

void throw_cuda_error(CUresult r, const char* what) {
    const char* name = nullptr;
    const char* text = nullptr;
    if (g_driver != nullptr) {
        g_driver->cuGetErrorName(r, &name);
        g_driver->cuGetErrorString(r, &text);
    }
    throw CudaError(static_cast<int>(r), name ? name : "CUDA_ERROR_UNKNOWN",
                    std::string(what) + ": " + (text ? text : "unknown error"));
}

}  // namespace pgk
