// Evictable buffers on the way into device work. The pool may spill an evictable buffer to pinned
// host memory whenever it needs room and restores it, possibly at another address, when it is
// touched. So every piece of work that reads Array::data_ptr() calls make_resident on its stream
// first, after every allocation the same operation makes (an allocation may spill a buffer
// touched before it), and enqueues right after. Non-evictable arrays cost one flag check.
#pragma once

#include <initializer_list>
#include <vector>

#include "core/array.hpp"
#include "core/stream.hpp"

namespace pgk {

// Touches every evictable buffer among `arrays` on `stream`, together (pool_touch_all: restoring
// one never spills another), so all their addresses are current at once. Throws
// OutOfMemoryError when they do not fit on the device together, std::invalid_argument when
// `stream` is being captured into a CUDA graph.
void make_resident(const StreamPtr& stream, std::initializer_list<const Array*> arrays);
void make_resident(const StreamPtr& stream, const std::vector<const Array*>& arrays);

}  // namespace pgk
