// The Rust core's C API (pygpukit._rust._C_API): every device allocation, every free and every
// launch of the runtime goes through it. The capsule is imported on first need (GIL held), its
// version and size checked, and the device backend below registered once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pygpukit/rust_capi.h"

namespace pgk {

// The API, imported and with the CUDA backend registered. Throws MissingComponentError (Python
// ImportError) naming what is missing when _rust or its capsule is not there.
const pgk_api& rust_api();
// True once rust_api() has succeeded (cheap; used where nothing can have been allocated yet).
bool rust_api_ready();

struct PoolBlock {
    uint64_t id = 0;
    uint64_t ptr = 0;
    uint64_t size = 0;
};

// pool_alloc (flags: PGK_ALLOC_*), raising OutOfMemoryError / CudaError on refusal. The pool
// may wait for fences or spill under pressure: runs with the GIL released.
PoolBlock pool_alloc(int device, uint64_t nbytes, uint64_t stream, uint32_t flags);
// How many pool_alloc / pool_touch calls this thread has made on `device`. Either may spill that
// device's evictable blocks, so an evictable buffer's address is known current only if nothing was
// called on its device since it was made resident (Buffer::check_resident).
uint64_t pool_epoch(int device);
// pool_touch: the block resident for work on `stream` (restored if it was spilled, so its ptr may
// differ from the last one). Same errors and GIL rule as pool_alloc.
PoolBlock pool_touch(int device, uint64_t block_id, uint64_t nbytes, uint64_t stream);
// pool_touch_all: the blocks resident together (none spilled for another); out[i] for ids[i].
// `nbytes` (their total) is what an OutOfMemoryError reports.
void pool_touch_all(int device, const std::vector<uint64_t>& ids, uint64_t nbytes, uint64_t stream,
                    std::vector<PoolBlock>& out);

// One dispatch ticket around an enqueue: begin() may block on the dispatch controller (pacing,
// in-flight limits); the caller must not hold the GIL. end() reports whether the launch worked.
class DispatchTicket {
  public:
    DispatchTicket(const pgk_api& api, int device, uint64_t stream);
    ~DispatchTicket();
    void end(bool ok);
    DispatchTicket(const DispatchTicket&) = delete;
    DispatchTicket& operator=(const DispatchTicket&) = delete;

  private:
    const pgk_api& api_;
    uint64_t ticket_ = 0;
    bool open_ = false;
};

// Text of the Rust side's last error on this thread.
std::string rust_last_error();

}  // namespace pgk
