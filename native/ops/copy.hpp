// Copies between host and device and between arrays (strided, cross-device), and contiguous().
#pragma once

#include <pybind11/numpy.h>

#include "core/array.hpp"
#include "core/stream.hpp"

namespace pgk {

// dst <- host ndarray of the same shape and dtype (by NumPy dtype name, so ml_dtypes.bfloat16
// matches "bfloat16"). blocking: returns once the data is on the device. Otherwise the Rust
// transfer engine stages it through pinned memory on the copy stream and the call returns once
// the host bytes are read (the ndarray may be reused; `stream` sees the data).
void copy_from_host(const Array& dst, pybind11::array host, const StreamPtr& stream, bool blocking);
// host (C-contiguous, writeable, same shape and dtype) <- src; waits with the GIL released.
void copy_to_host(const Array& src, pybind11::array host, const StreamPtr& stream);
// host <- src without holding the caller: the constructor (GIL held) checks, packs a strided
// source and orders the transfer engine's device-to-host stream after `stream`; run() (no GIL,
// any thread) copies through pinned staging and returns once the bytes are in `host`. The object
// keeps the device data and the host array alive until it goes.
class HostDownload {
  public:
    HostDownload(const Array& src, pybind11::array host, const StreamPtr& stream);
    void run();
    const pybind11::array& host() const { return host_; }

  private:
    Array packed_;
    pybind11::array host_;
    void* host_ptr_ = nullptr;
    uint64_t nbytes_ = 0;
    bool done_ = false;
};

// dst <- src (same shape and dtype), any layouts, same or different devices; no host sync.
void copy_device(const Array& dst, const Array& src, const StreamPtr& stream);
// `a` itself when C-contiguous, else a C-contiguous copy.
Array contiguous(const Array& a, const StreamPtr& stream);

// Shape and dtype checks shared by the copies: std::invalid_argument on mismatch.
void check_same_shape(const Dims& a, const Dims& b, const char* what);

}  // namespace pgk
