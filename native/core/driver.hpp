// The CUDA driver, opened with dlopen (libcudart and libcuda are never linked). Every entry point
// is resolved once through cuGetProcAddress into one table of typed function pointers; callers
// write `drv().cuMemAlloc(...)` and wrap the result in check().
#pragma once

#include <cuda.h>

#include <string>
#include <utility>
#include <vector>

namespace pgk {

// Every driver function the runtime calls. The pointer types come from cuda.h through decltype,
// so versioned macros (cuMemAlloc -> cuMemAlloc_v2) give the right signature; the name passed to
// cuGetProcAddress is the unversioned one, which the driver maps to the version we ask for.
#define PGK_DRIVER_FUNCTIONS(X)          \
    X(cuInit)                            \
    X(cuDriverGetVersion)                \
    X(cuGetErrorName)                    \
    X(cuGetErrorString)                  \
    X(cuDeviceGet)                       \
    X(cuDeviceGetCount)                  \
    X(cuDeviceGetName)                   \
    X(cuDeviceGetAttribute)              \
    X(cuDeviceTotalMem)                  \
    X(cuDeviceGetPCIBusId)               \
    X(cuDeviceCanAccessPeer)             \
    X(cuDevicePrimaryCtxRetain)          \
    X(cuCtxSetCurrent)                   \
    X(cuCtxGetCurrent)                   \
    X(cuCtxSynchronize)                  \
    X(cuCtxGetStreamPriorityRange)       \
    X(cuMemAlloc)                        \
    X(cuMemFree)                         \
    X(cuMemGetInfo)                      \
    X(cuMemHostAlloc)                    \
    X(cuMemFreeHost)                     \
    X(cuMemcpyAsync)                     \
    X(cuMemcpyHtoDAsync)                 \
    X(cuMemcpyDtoHAsync)                 \
    X(cuMemcpyPeerAsync)                 \
    X(cuStreamCreateWithPriority)        \
    X(cuStreamDestroy)                   \
    X(cuStreamSynchronize)               \
    X(cuStreamQuery)                     \
    X(cuStreamWaitEvent)                 \
    X(cuStreamIsCapturing)               \
    X(cuStreamBeginCapture)              \
    X(cuStreamEndCapture)                \
    X(cuStreamGetPriority)               \
    X(cuThreadExchangeStreamCaptureMode) \
    X(cuEventCreate)                     \
    X(cuEventDestroy)                    \
    X(cuEventRecord)                     \
    X(cuEventQuery)                      \
    X(cuEventSynchronize)                \
    X(cuEventElapsedTime)                \
    X(cuModuleLoadData)                  \
    X(cuModuleUnload)                    \
    X(cuModuleGetFunction)               \
    X(cuFuncGetAttribute)                \
    X(cuFuncSetAttribute)                \
    X(cuLaunchKernel)                    \
    X(cuGraphInstantiateWithFlags)       \
    X(cuGraphLaunch)                     \
    X(cuGraphExecDestroy)                \
    X(cuGraphDestroy)

struct DriverTable {
#define PGK_DECLARE_DRIVER_POINTER(name) decltype(&::name) name = nullptr;
    PGK_DRIVER_FUNCTIONS(PGK_DECLARE_DRIVER_POINTER)
#undef PGK_DECLARE_DRIVER_POINTER
};

struct DriverLoadResult {
    bool loaded = false;
    std::string path;
    std::vector<std::pair<std::string, std::string>> tried;
    int driver_version = 0;
};

// Open the first candidate that loads and resolve the table. Never throws for a missing library;
// returns what was tried. A second call after success returns the first result.
DriverLoadResult load_driver(const std::vector<std::string>& candidates);
bool driver_loaded();
// cuInit(0); throws CudaError (e.g. no device, driver/kernel-module mismatch).
void init_driver();

[[noreturn]] void throw_driver_not_loaded();
extern const DriverTable* g_driver;  // set once by load_driver

// The table; throws CudaError(CUDA_ERROR_NOT_INITIALIZED) when load_driver has not succeeded.
inline const DriverTable& drv() {
    if (g_driver == nullptr) throw_driver_not_loaded();
    return *g_driver;
}

// Throws CudaError(code, cuGetErrorName, "<what>: cuGetErrorString") when r != CUDA_SUCCESS.
[[noreturn]] void throw_cuda_error(CUresult r, const char* what);
inline void check(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) throw_cuda_error(r, what);
}

}  // namespace pgk
