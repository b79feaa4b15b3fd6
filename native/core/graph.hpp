// CUDA graph capture and replay. Capture runs in thread-local mode (a sync in another thread does
// not break it); allocations made on the capturing stream come from a graph-private region of the
// Rust pool, which lives as long as the Graph.
#pragma once

#include <cuda.h>

#include <memory>

#include "core/stream.hpp"

namespace pgk {

class Graph {
  public:
    Graph(CUgraph graph, CUgraphExec exec, uint64_t pool_id, int device)
        : graph_(graph), exec_(exec), pool_id_(pool_id), device_(device) {}
    ~Graph();
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;

    void replay(const Stream& stream) const;
    int device() const { return device_; }

  private:
    CUgraph graph_;
    CUgraphExec exec_;
    uint64_t pool_id_;  // the Rust pool's graph region; 0 when none was opened
    int device_;
};

void begin_capture(const StreamPtr& stream);
std::shared_ptr<Graph> end_capture(const StreamPtr& stream);

}  // namespace pgk
