#include "core/buffer.hpp"

#include "core/rust_api.hpp"

namespace pgk {

BufferPtr Buffer::allocate(int device, uint64_t nbytes, const StreamPtr& stream, bool evictable) {
    BufferPtr buffer(new Buffer());
    buffer->device_ = device;
    buffer->last_stream_ = stream;
    if (nbytes > 0) {
        // An empty buffer has no block to spill: it is never evictable.
        buffer->evictable_ = evictable;
        PoolBlock block =
            pool_alloc(device, nbytes, stream->id(), evictable ? PGK_ALLOC_EVICTABLE : 0u);
        buffer->block_id_ = block.id;
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

bool Buffer::touch(const StreamPtr& stream) {
    const PoolBlock block = pool_touch(block_id_, nbytes_, stream->id());
    used_on(stream);
    const bool moved = block.ptr != ptr_;
    ptr_ = block.ptr;
    return moved;
}

Buffer::~Buffer() {
    if (block_id_ != 0 && rust_api_ready()) {
        rust_api().pool_free(block_id_, last_stream_ ? last_stream_->id() : 0);
    }
    if (owner_ != nullptr && Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_DECREF(owner_);
        PyGILState_Release(gil);
    }
}

}  // namespace pgk
