#include "core/buffer.hpp"

#include <mutex>
#include <stdexcept>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/event.hpp"
#include "core/rust_api.hpp"

namespace pgk {

namespace {

// A runtime-owned stream per device that only orders frees after foreign streams.
const Stream& release_stream(int device) {
    static std::once_flag once[kMaxDevices];
    // Leaked like the default streams: frees may run during interpreter exit.
    static StreamPtr* streams[kMaxDevices] = {};
    std::call_once(once[device],
                   [device] { streams[device] = new StreamPtr(Stream::create(device, 0)); });
    return **streams[device];
}

// The stream to free a block on whose last use was on `last`. The pool keeps that handle and
// records fences on it later, so a foreign stream (Stream.wrap), which its owner may destroy, never
// reaches it: the block is freed on a runtime-owned stream that waits for the foreign stream's
// work instead. A foreign stream being captured keeps the block (the pool defers frees made
// during a capture to the graph's release, and a wait on a captured event would break the
// capture).
uint64_t free_stream(const StreamPtr& last) {
    if (!last) return 0;
    if (last->owned()) return last->id();
    try {
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        check(drv().cuStreamIsCapturing(last->handle(), &status), "cuStreamIsCapturing");
        if (status != CU_STREAM_CAPTURE_STATUS_NONE) return last->id();
        const Stream& release = release_stream(last->device());
        Event done(last->device(), false);
        done.record(*last);
        release.wait_event(done);
        return release.id();
    } catch (const std::exception&) {
        // Nothing could be ordered (the driver refused the event or the release stream): the
        // foreign handle is all there is, and the rule in stream.hpp keeps it alive until here.
        return last->id();
    }
}

}  // namespace

BufferPtr Buffer::allocate(int device, uint64_t nbytes, const StreamPtr& stream, bool evictable) {
    // make_shared: the buffer and its control block in one allocation (shared_ptr(new Buffer)
    // makes two, ~30-50 ns more on every gp.empty and every op's output).
    struct Made : Buffer {};
    BufferPtr buffer = std::make_shared<Made>();
    buffer->device_ = device;
    buffer->last_stream_ = stream;
    if (nbytes > 0) {
        // An empty buffer has no block to spill: it is never evictable.
        buffer->evictable_ = evictable;
        PoolBlock block =
            pool_alloc(device, nbytes, stream->id(), evictable ? PGK_ALLOC_EVICTABLE : 0u);
        buffer->block_id_ = block.id;
        buffer->resident_epoch_ = pool_epoch(device);
        buffer->ptr_ = block.ptr;
        buffer->nbytes_ = nbytes;
    }
    return buffer;
}

BufferPtr Buffer::external(int device, uint64_t ptr, uint64_t nbytes, PyObject* owner,
                           const StreamPtr& stream) {
    BufferPtr buffer(new Buffer());
    buffer->device_ = device;
    buffer->ptr_ = ptr;
    buffer->nbytes_ = nbytes;
    buffer->last_stream_ = stream;
    Py_INCREF(owner);
    buffer->owner_ = owner;
    return buffer;
}

void Buffer::touch(const StreamPtr& stream) {
    restored(pool_touch(device_, block_id_, nbytes_, stream->id()).ptr, stream);
}

void Buffer::mark_resident() { resident_epoch_ = pool_epoch(device_); }

void Buffer::check_resident() const {
    if (resident_epoch_ != pool_epoch(device_)) {
        throw std::logic_error(
            "an evictable array's address was read without make_resident after a pool call that "
            "may have moved it: this operation does not support evictable arrays yet "
            "(native/core/residency.hpp)");
    }
}

Buffer::~Buffer() {
    if (block_id_ != 0 && rust_api_ready()) {
        rust_api().pool_free(block_id_, free_stream(last_stream_));
    }
    if (owner_ != nullptr && Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_DECREF(owner_);
        PyGILState_Release(gil);
    }
}

}  // namespace pgk
