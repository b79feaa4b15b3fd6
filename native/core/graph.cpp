#include "core/graph.hpp"

#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <utility>

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

// Captures begun and not yet ended in this process, and the releases waiting for them to end.
// Leaked: destructors may run during interpreter exit, after static destruction.
std::mutex& g_release_mutex = *new std::mutex;
auto& g_deferred_releases = *new std::vector<std::function<void()>>;
int g_open_captures = 0;  // under g_release_mutex

void open_capture() {
    std::lock_guard<std::mutex> lock(g_release_mutex);
    ++g_open_captures;
}

// After cuStreamEndCapture (or a failed begin): the last capture to end runs what waited.
void close_capture() {
    std::vector<std::function<void()>> due;
    {
        std::lock_guard<std::mutex> lock(g_release_mutex);
        if (--g_open_captures > 0) return;
        due.swap(g_deferred_releases);
    }
    for (auto& release : due) {
        try {
            release();
        } catch (const std::exception&) {
            // A release runs for a destructor: it has nobody to report to.
        }
    }
}

// The driver calls of a graph that is gone (see Graph::~Graph).
void destroy_graph(CUgraph graph, CUgraphExec exec, uint64_t pool_id, int device,
                   const StreamPtr& capture_stream, const std::vector<StreamPtr>& replayed_on) {
    if (!driver_loaded()) return;
    drv().cuGraphExecDestroy(exec);
    drv().cuGraphDestroy(graph);
    if (pool_id == 0) return;
    // The region's ranges are reused in the capture stream's order: make that order include the
    // replays still pending elsewhere (no host wait).
    for (const StreamPtr& other : replayed_on) {
        try {
            Event done(device, false);
            done.record(*other);
            capture_stream->wait_event(done);
        } catch (const std::exception&) {
            // A foreign stream destroyed by its owner has no pending replay left to wait for.
        }
    }
    rust_api().pool_graph_release(pool_id);
}

}  // namespace

void release_outside_capture(std::function<void()> release) {
    {
        std::lock_guard<std::mutex> lock(g_release_mutex);
        if (g_open_captures > 0) {
            g_deferred_releases.push_back(std::move(release));
            return;
        }
    }
    release();
}

Graph::~Graph() {
    // Python's garbage collector may drop a graph while another one is being captured, where
    // cuGraphExecDestroy (and a wait on the capture stream) would invalidate that capture.
    release_outside_capture([graph = graph_, exec = exec_, pool_id = pool_id_, device = device_,
                             capture_stream = std::move(capture_stream_),
                             replayed_on = std::move(replayed_on_)] {
        destroy_graph(graph, exec, pool_id, device, capture_stream, replayed_on);
    });
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
    // Counted open before the driver starts capturing, so that no release slips in between.
    open_capture();
    const CUresult begun =
        drv().cuStreamBeginCapture(stream->handle(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (begun != CUDA_SUCCESS) {
        close_capture();
        throw_cuda_error(begun, "cuStreamBeginCapture");
    }
    // The pool checks that the stream is capturing, so its graph region opens second.
    uint64_t pool_id = 0;
    if (api.pool_graph_begin(stream->device(), stream->id(), &pool_id) != PGK_OK) {
        const std::string reason = rust_last_error();
        CUgraph discarded = nullptr;
        if (drv().cuStreamEndCapture(stream->handle(), &discarded) == CUDA_SUCCESS &&
            discarded != nullptr) {
            drv().cuGraphDestroy(discarded);
        }
        close_capture();
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
    close_capture();
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
