// C++ exceptions of the runtime. bindings/errors.cpp translates each into the Python class of
// pygpukit.errors registered at import (CudaError, CompileError, OutOfMemoryError).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pgk {

// A CUresult that is not CUDA_SUCCESS (or a runtime rule with a CUDA error code, e.g. a sync
// point inside graph capture).
class CudaError : public std::runtime_error {
  public:
    CudaError(int code, std::string name, std::string message)
        : std::runtime_error(name + ": " + message),
          code_(code),
          name_(std::move(name)),
          message_(std::move(message)) {}
    int code() const { return code_; }
    const std::string& name() const { return name_; }
    const std::string& message() const { return message_; }

  private:
    int code_;
    std::string name_;
    std::string message_;
};

// NVRTC rejected a source; log() holds the compiler's log with the failing line.
class CompileError : public std::runtime_error {
  public:
    explicit CompileError(std::string log) : std::runtime_error(log), log_(std::move(log)) {}
    const std::string& log() const { return log_; }

  private:
    std::string log_;
};

// The Rust pool refused an allocation (device full, or a global / partition limit).
class OutOfMemoryError : public std::runtime_error {
  public:
    OutOfMemoryError(uint64_t requested, std::string detail)
        : std::runtime_error("out of memory allocating " + std::to_string(requested) +
                             " bytes: " + detail),
          requested_(requested),
          detail_(std::move(detail)) {}
    uint64_t requested() const { return requested_; }
    const std::string& detail() const { return detail_; }

  private:
    uint64_t requested_;
    std::string detail_;
};

// A required native component is missing (e.g. the _rust module without its C API capsule).
// Translated to Python's ImportError.
class MissingComponentError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

}  // namespace pgk
