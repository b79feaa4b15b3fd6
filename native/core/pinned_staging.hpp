// Page-locked host buffers for asynchronous copies from pageable memory: the data is first copied
// into a staging buffer, then DMA'd on the stream. A buffer is reused once the event recorded
// after its copy has completed. (The C API exposes no pinned pool to _native, so this small cache
// lives here; it only grows to the largest set of copies in flight at once.)
#pragma once

#include <cstddef>
#include <cstdint>

namespace pgk {

class Stream;

struct StagingLease {
    void* ptr = nullptr;
    size_t slot = 0;
};

// A pinned buffer of at least nbytes that no pending copy uses.
StagingLease staging_acquire(uint64_t nbytes);
// The copies reading or writing the lease were enqueued on `stream`: reusable once they finish.
void staging_release(const StagingLease& lease, const Stream& stream);

}  // namespace pgk
