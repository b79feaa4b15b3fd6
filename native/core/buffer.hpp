// A block of device memory shared by every Array that views it. Pool-owned buffers go back to the
// Rust pool on the last reference, on the stream of their last use (so the pool can reuse them on
// that stream at once and on others only after that work completes). External buffers (DLPack
// imports) keep their producer's Python object alive instead.
//
// An evictable buffer (PGK_ALLOC_EVICTABLE) may be spilled to pinned host memory by the pool under
// pressure and comes back at another address: before work on a stream reads its address, that
// work calls make_resident (core/residency.hpp), which touches it on that stream.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>

#include "core/stream.hpp"

namespace pgk {

class Buffer {
  public:
    // nbytes bytes from the Rust pool, usable on `stream` (no allocation for nbytes == 0).
    static std::shared_ptr<Buffer> allocate(int device, uint64_t nbytes, const StreamPtr& stream,
                                            bool evictable = false);
    // Memory owned by `owner` (a new reference is taken; released with the GIL on destruction).
    static std::shared_ptr<Buffer> external(int device, uint64_t ptr, uint64_t nbytes,
                                            PyObject* owner, const StreamPtr& stream);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    uint64_t ptr() const { return ptr_; }
    uint64_t nbytes() const { return nbytes_; }
    int device() const { return device_; }
    bool is_external() const { return owner_ != nullptr; }
    bool evictable() const { return evictable_; }
    const StreamPtr& last_stream() const { return last_stream_; }

    // Record that work using this buffer was enqueued on `stream` (called with the GIL held,
    // which serializes updates).
    void used_on(const StreamPtr& stream) {
        if (last_stream_.get() != stream.get()) last_stream_ = stream;
    }
    uint64_t block_id() const { return block_id_; }
    // Evictable buffers only: makes the buffer resident for work about to be enqueued on
    // `stream` (pool_touch; may restore it at a new address, read ptr() after) and records the
    // use. make_resident is the caller.
    void touch(const StreamPtr& stream);
    // make_resident's pool_touch_all gave this buffer's block back at `ptr` for `stream`.
    void restored(uint64_t ptr, const StreamPtr& stream) {
        ptr_ = ptr;
        used_on(stream);
    }
    // make_resident's seal: no pool call since, so ptr() is current on this thread.
    void mark_resident();
    // Throws std::logic_error (Python RuntimeError) when an evictable buffer's address is read
    // after a pool call that may have spilled it: an operation that skipped make_resident fails
    // loudly instead of reading freed memory.
    void check_resident() const;

  protected:
    // Protected, not private: Buffer::allocate makes buffers with std::make_shared through a
    // local subclass (one heap allocation for the buffer and its reference count).
    Buffer() = default;

  private:
    uint64_t block_id_ = 0;
    uint64_t ptr_ = 0;
    uint64_t nbytes_ = 0;
    int device_ = 0;
    bool evictable_ = false;
    uint64_t resident_epoch_ = 0;  // pool_epoch() when last known resident (evictable only)
    PyObject* owner_ = nullptr;
    StreamPtr last_stream_;
};

using BufferPtr = std::shared_ptr<Buffer>;

}  // namespace pgk
