#include "core/graph.hpp"

#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/errors.hpp"
#include "core/event.hpp"
#include "core/launch.hpp"
#include "core/rust_api.hpp"

namespace pgk {

namespace {

std::mutex g_capture_mutex;
struct ActiveCapture {
    uint64_t pool_id;        // the Rust pool's graph region
    std::thread::id thread;  // thread-local capture mode: begin and end on this thread
};
std::unordered_map<CUstream, ActiveCapture> g_captures;  // by capturing stream

}  // namespace

Graph::~Graph() {
    if (!driver_loaded()) return;
    drv().cuGraphExecDestroy(exec_);
    drv().cuGraphDestroy(graph_);
    if (pool_id_ == 0) return;
    // The region's ranges are reused in the capture stream's order: make that order include the
    // replays still pending elsewhere (no host wait).
    for (const StreamPtr& other : replayed_on_) {
        try {
            Event done(device_, false);
            done.record(*other);
            capture_stream_->wait_event(done);
        } catch (const std::exception&) {
            // A foreign stream destroyed by its owner has no pending replay left to wait for.
        }
    }
    rust_api().pool_graph_release(pool_id_);
}

void Graph::replay(const StreamPtr& stream) {
    if (stream->device() != device_) {
        throw std::invalid_argument("Graph.replay: the graph was captured on device " +
                                    std::to_string(device_) + ", the stream is on device " +
                                    std::to_string(stream->device()));
    }
    if (stream->handle() != capture_stream_->handle()) {
        bool known = false;
        for (const StreamPtr& s : replayed_on_) known |= s->handle() == stream->handle();
        if (!known) replayed_on_.push_back(stream);
    }
    launch_graph(exec_, *stream);
}

void begin_capture(const StreamPtr& stream) {
    bind_device(stream->device());
    {
        std::lock_guard<std::mutex> lock(g_capture_mutex);
        if (g_captures.count(stream->handle()) != 0) {
            throw std::invalid_argument("begin_capture: this stream is already being captured");
        }
    }
    const pgk_api& api = rust_api();
    check(drv().cuStreamBeginCapture(stream->handle(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
          "cuStreamBeginCapture");
    // The pool checks that the stream is capturing, so its graph region opens second.
    uint64_t pool_id = 0;
    if (api.pool_graph_begin(stream->device(), stream->id(), &pool_id) != PGK_OK) {
        const std::string reason = rust_last_error();
        CUgraph discarded = nullptr;
        if (drv().cuStreamEndCapture(stream->handle(), &discarded) == CUDA_SUCCESS &&
            discarded != nullptr) {
            drv().cuGraphDestroy(discarded);
        }
        throw CudaError(CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "pool_graph_begin: " + reason);
    }
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    g_captures[stream->handle()] = ActiveCapture{pool_id, std::this_thread::get_id()};
    note_capture_started();
}

std::shared_ptr<Graph> end_capture(const StreamPtr& stream) {
    uint64_t pool_id = 0;
    {
        std::lock_guard<std::mutex> lock(g_capture_mutex);
        auto it = g_captures.find(stream->handle());
        if (it == g_captures.end()) {
            throw std::invalid_argument("end_capture: this stream is not being captured");
        }
        if (it->second.thread != std::this_thread::get_id()) {
            throw std::invalid_argument(
                "end_capture: the capture was begun on another thread and must end there");
        }
        pool_id = it->second.pool_id;
        g_captures.erase(it);
    }
    note_capture_ended();
    bind_device(stream->device());
    const pgk_api& api = rust_api();
    CUgraph graph = nullptr;
    CUresult r = drv().cuStreamEndCapture(stream->handle(), &graph);
    api.pool_graph_end(pool_id);
    if (r != CUDA_SUCCESS) {
        api.pool_graph_release(pool_id);
        throw_cuda_error(r, "cuStreamEndCapture");
    }
    CUgraphExec exec = nullptr;
    r = drv().cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (r != CUDA_SUCCESS) {
        drv().cuGraphDestroy(graph);
        api.pool_graph_release(pool_id);
        throw_cuda_error(r, "cuGraphInstantiate");
    }
    return std::make_shared<Graph>(graph, exec, pool_id, stream);
}

}  // namespace pgk
