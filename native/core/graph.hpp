// CUDA graph capture and replay. Capture runs in thread-local mode (a sync in another thread does
// not break it); allocations made on the capturing stream come from a graph-private region of the
// Rust pool, which lives as long as the Graph and, when it was replayed on other streams than the
// capture stream, until those replays have completed (the capture stream waits for them before
// the region is released, and the region's ranges belong to the capture stream).
#pragma once

#include <cuda.h>

#include <functional>
#include <memory>
#include <vector>

#include "core/stream.hpp"

namespace pgk {

class Graph {
  public:
    Graph(CUgraph graph, CUgraphExec exec, uint64_t pool_id, StreamPtr capture_stream)
        : graph_(graph),
          exec_(exec),
          pool_id_(pool_id),
          device_(capture_stream->device()),
          capture_stream_(std::move(capture_stream)) {}
    ~Graph();
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;

    void replay(const StreamPtr& stream);
    int device() const { return device_; }

  private:
    CUgraph graph_;
    CUgraphExec exec_;
    uint64_t pool_id_;  // the Rust pool's graph region; 0 when none was opened
    int device_;
    StreamPtr capture_stream_;
    std::vector<StreamPtr> replayed_on_;  // streams other than the capture stream
};

void begin_capture(const StreamPtr& stream);
std::shared_ptr<Graph> end_capture(const StreamPtr& stream);

// Runs `release` (driver calls that destroy a graph or unload a module) now, or, while a stream of
// this process is being captured, once the last capture has ended. The driver does not permit
// such calls during a capture: it invalidates the capture without an error of its own, and the
// capture's next launch fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. Destructors reach here
// from Python's garbage collector, which may run in the middle of any capture.
void release_outside_capture(std::function<void()> release);

}  // namespace pgk
