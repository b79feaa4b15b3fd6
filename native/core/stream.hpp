// Streams: owned non-blocking streams, wrapped foreign ones (PyTorch, CuPy), and the thread-local
// current stream per device, whose default is a per-device non-blocking stream the runtime owns.
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>

namespace pgk {

class Event;

class Stream {
  public:
    // A non-blocking stream on `device` (lower numbers are higher priority, as in CUDA): a recycled
    // idle one of that priority, else a new one. Owned streams are recycled when the last
    // reference goes, never destroyed (see stream.cpp).
    static std::shared_ptr<Stream> create(int device, int priority);
    // A stream someone else owns; never destroyed here. It must outlive the arrays whose last use
    // was on it: when such an array's buffer goes, its block is handed to a runtime-owned stream
    // ordered after this one (buffer.cpp), so the pool never keeps the foreign handle.
    static std::shared_ptr<Stream> wrap(CUstream handle, int device);
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    CUstream handle() const { return handle_; }
    uint64_t id() const { return reinterpret_cast<uint64_t>(handle_); }
    int device() const { return device_; }
    bool owned() const { return owned_; }  // false for Stream.wrap
    int priority() const;

    void synchronize() const;  // blocks; the caller releases the GIL
    bool query() const;        // true when all enqueued work is done
    void wait_event(const Event& event) const;

    // Scratch memory a library keeps for its work on this stream (cuBLASLt's workspace). It
    // lives as long as this Stream object, not the recycled handle, so a stream the user is done
    // with gives its scratch back to the pool. `scratch` is null until `keep_scratch`, which keeps
    // `value` unless another thread kept one first, and returns the one kept.
    std::shared_ptr<void> scratch() const;
    std::shared_ptr<void> keep_scratch(std::shared_ptr<void> value) const;

  private:
    Stream(CUstream handle, int device, int requested_priority, bool owned)
        : handle_(handle),
          device_(device),
          requested_priority_(requested_priority),
          owned_(owned) {}
    CUstream handle_;
    int device_;
    int requested_priority_;  // the recycling key of an owned stream
    bool owned_;
    mutable std::mutex scratch_mutex_;
    mutable std::shared_ptr<void> scratch_;
};

using StreamPtr = std::shared_ptr<Stream>;

StreamPtr default_stream(int device);
StreamPtr current_stream(int device);
StreamPtr current_stream();  // of the current device
// Sets the current stream of `stream`'s device on this thread; nullptr restores the default of
// `device`.
void set_current_stream(const StreamPtr& stream, int device);
std::pair<int, int> priority_range(int device);  // (least, greatest)

// Before any call that waits for the device: a wait inside a CUDA graph capture would invalidate
// the capture, so refuse it with a clear CudaError and leave the capture intact.
void ensure_not_capturing(CUstream stream, const char* what);
// Capture bookkeeping of this thread (graph.cpp).
void note_capture_started();
void note_capture_ended();

}  // namespace pgk
