// The CUDA driver, opened with dlopen (libcudart and libcuda are never linked). Every entry point
// is resolved once through cuGetProcAddress into one table of typed function pointers; callers
// write `drv().cuMemAlloc(...)` and wrap the result in check().
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>
#include <utility>
#include <vector>

namespace pgk {

// Every driver function the runtime calls, with the CUDA version of the ABI we call it with.
// Each pointer is typed PFN_<name>_v<version> (cudaTypedefs.h) and resolved through
// cuGetProcAddress at that same version, so a driver whose newest revision of a function changed
// its signature (cuCtxSynchronize takes a context from 13.0 on) still hands us the one we call.
// Call sites spell the plain name: drv().cuMemAlloc(...) (cuda.h's macros rename both the member
// and the call the same way).
#define PGK_DRIVER_FUNCTIONS(X)                 \
    X(cuInit, 2000)                             \
    X(cuDriverGetVersion, 2020)                 \
    X(cuGetErrorName, 6000)                     \
    X(cuGetErrorString, 6000)                   \
    X(cuDeviceGet, 2000)                        \
    X(cuDeviceGetCount, 2000)                   \
    X(cuDeviceGetName, 2000)                    \
    X(cuDeviceGetAttribute, 2000)               \
    X(cuDeviceTotalMem, 3020)                   \
    X(cuDeviceGetPCIBusId, 4010)                \
    X(cuDeviceCanAccessPeer, 4000)              \
    X(cuDevicePrimaryCtxRetain, 7000)           \
    X(cuCtxSetCurrent, 4000)                    \
    X(cuCtxGetCurrent, 4000)                    \
    X(cuCtxSynchronize, 2000)                   \
    X(cuCtxGetStreamPriorityRange, 5050)        \
    X(cuMemAlloc, 3020)                         \
    X(cuMemFree, 3020)                          \
    X(cuMemGetInfo, 3020)                       \
    X(cuMemHostAlloc, 2020)                     \
    X(cuMemFreeHost, 2000)                      \
    X(cuMemcpyAsync, 4000)                      \
    X(cuMemsetD32Async, 3020)                   \
    X(cuMemcpyHtoDAsync, 3020)                  \
    X(cuMemcpyDtoHAsync, 3020)                  \
    X(cuPointerGetAttribute, 4000)              \
    X(cuMemcpyPeerAsync, 4000)                  \
    X(cuStreamCreateWithPriority, 5050)         \
    X(cuStreamDestroy, 4000)                    \
    X(cuStreamSynchronize, 2000)                \
    X(cuStreamQuery, 2000)                      \
    X(cuStreamGetCtx, 9020)                     \
    X(cuStreamWaitEvent, 3020)                  \
    X(cuStreamIsCapturing, 10000)               \
    X(cuStreamBeginCapture, 10010)              \
    X(cuStreamEndCapture, 10000)                \
    X(cuStreamGetPriority, 5050)                \
    X(cuThreadExchangeStreamCaptureMode, 10010) \
    X(cuEventCreate, 2000)                      \
    X(cuEventDestroy, 4000)                     \
    X(cuEventRecord, 2000)                      \
    X(cuEventQuery, 2000)                       \
    X(cuEventSynchronize, 2000)                 \
    X(cuEventElapsedTime, 2000)                 \
    X(cuModuleLoadData, 2000)                   \
    X(cuModuleUnload, 2000)                     \
    X(cuModuleGetFunction, 2000)                \
    X(cuFuncGetAttribute, 2020)                 \
    X(cuFuncSetAttribute, 9000)                 \
    X(cuLaunchKernel, 4000)                     \
    X(cuLaunchKernelEx, 11060)                  \
    X(cuGraphInstantiateWithFlags, 11040)       \
    X(cuGraphLaunch, 10000)                     \
    X(cuGraphExecDestroy, 10000)                \
    X(cuGraphDestroy, 10000)

// Entry points a driver may lack (newer than the oldest driver we run on): resolved the same way,
// left nullptr when missing. Callers test the pointer and fall back; never a load failure.
#define PGK_DRIVER_OPTIONAL_FUNCTIONS(X)  \
    X(cuDeviceGetDevResource, 12040)      \
    X(cuDevSmResourceSplitByCount, 12040) \
    X(cuDevResourceGenerateDesc, 12040)   \
    X(cuGreenCtxCreate, 12040)            \
    X(cuGreenCtxDestroy, 12040)           \
    X(cuGreenCtxStreamCreate, 12050)      \
    X(cuTensorMapEncodeTiled, 12000)

struct DriverTable {
#define PGK_DECLARE_DRIVER_POINTER(name, version) PFN_##name##_v##version name = nullptr;
    PGK_DRIVER_FUNCTIONS(PGK_DECLARE_DRIVER_POINTER)
    PGK_DRIVER_OPTIONAL_FUNCTIONS(PGK_DECLARE_DRIVER_POINTER)
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
