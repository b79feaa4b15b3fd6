#include "core/residency.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/driver.hpp"
#include "core/rust_api.hpp"

namespace pgk {

namespace {

template <typename Arrays>
void resident(const StreamPtr& stream, const Arrays& arrays) {
    bool any = false;
    for (const Array* a : arrays) any |= a->buffer()->evictable();
    if (!any) return;
    // A graph bakes the address in, and the pool may move the buffer between replays.
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    check(drv().cuStreamIsCapturing(stream->handle(), &capture), "cuStreamIsCapturing");
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        throw std::invalid_argument(
            "evictable arrays cannot be used in CUDA graph capture: a replay would read the "
            "address the pool may since have moved; use a non-evictable array in the graph");
    }
    // Distinct buffers: views of one array share it.
    std::vector<Buffer*> buffers;
    for (const Array* a : arrays) {
        Buffer* b = a->buffer().get();
        if (b->evictable() && std::find(buffers.begin(), buffers.end(), b) == buffers.end()) {
            buffers.push_back(b);
        }
    }
    if (buffers.size() == 1) {
        buffers[0]->touch(stream);
    } else {
        // Together, so that restoring one cannot spill another of the same operation.
        std::vector<uint64_t> ids;
        uint64_t total = 0;
        for (const Buffer* b : buffers) {
            ids.push_back(b->block_id());
            total += b->nbytes();
        }
        std::vector<PoolBlock> blocks;
        pool_touch_all(stream->device(), ids, total, stream->id(), blocks);
        for (size_t i = 0; i < buffers.size(); ++i) buffers[i]->restored(blocks[i].ptr, stream);
    }
    for (Buffer* b : buffers) b->mark_resident();
}

}  // namespace

void make_resident(const StreamPtr& stream, std::initializer_list<const Array*> arrays) {
    resident(stream, arrays);
}

void make_resident(const StreamPtr& stream, const std::vector<const Array*>& arrays) {
    resident(stream, arrays);
}

}  // namespace pgk
