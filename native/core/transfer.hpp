// Pageable host memory <-> device through the Rust transfer engine (C API v2): copies are chunked
// through staging buffers of the Rust pinned pool and pipelined on two copy streams per device
// (one per direction) that the runtime owns, so the pinned memory is accounted in one place.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/stream.hpp"
#include "pygpukit/rust_capi.h"

namespace pgk {

// Copies nbytes of pageable `host` memory to device address `dev` after the work enqueued on
// `stream` so far; work enqueued on `stream` afterwards sees the data. Every byte of `host` has
// been read when this returns (it waits, with the GIL released, only for staging buffers).
void transfer_to_device(uint64_t dev, const void* host, uint64_t nbytes, const StreamPtr& stream);

// Makes the device-to-host copy stream of `stream`'s device wait for the work enqueued on
// `stream` so far (no host wait). Call with the GIL, in the caller's order of operations.
void order_download_after(const StreamPtr& stream);

// Copies nbytes from device address `dev` to pageable `host` on the device-to-host copy stream
// (ordered by order_download_after); returns once the bytes are in `host`. Waits: call without
// the GIL.
void transfer_to_host(int device, void* host, uint64_t dev, uint64_t nbytes);

// The backend's pull_launch (C API v5): zeroes the kernel's chunk counter and launches the upload
// kernel on `stream`, bypassing the dispatch controller (the Rust engine calls this under its own
// lock, and the kernel is the engine's, like its copies). The caller binds the device.
CUresult launch_upload_pull(int device, CUstream stream, const pgk_pull_args& args);

}  // namespace pgk
