#include "core/cublaslt.hpp"

#include <Python.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/buffer.hpp"
#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/dynlib.hpp"
#include "core/errors.hpp"
#include "core/gil.hpp"
#include "core/launch.hpp"
#include "core/rust_api.hpp"
#include "jit/builtin.hpp"

namespace pgk {

namespace {

// The few cublasLt.h declarations we use (the header is not a build requirement; these values
// are ABI-stable across CUDA 11-13).
using cublasStatus_t = int;
using cublasLtHandle_t = struct cublasLtContext*;
using cublasLtMatmulDesc_t = struct cublasLtMatmulDescOpaque*;
using cublasLtMatrixLayout_t = struct cublasLtMatrixLayoutOpaque*;
using cublasLtMatmulPreference_t = struct cublasLtMatmulPreferenceOpaque*;
struct cublasLtMatmulAlgo_t {
    uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
};
enum : int { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum : int { COMPUTE_32F = 68, COMPUTE_32F_FAST_TF32 = 77, COMPUTE_64F = 70 };
enum : int { OP_N = 0, OP_T = 1 };
enum : int { DESC_TRANSA = 3, DESC_TRANSB = 4 };
enum : int { LAYOUT_BATCH_COUNT = 5, LAYOUT_STRIDED_BATCH_OFFSET = 6 };
enum : int {
    PREF_MAX_WORKSPACE_BYTES = 1,
    PREF_MIN_ALIGNMENT_A = 5,
    PREF_MIN_ALIGNMENT_B = 6,
    PREF_MIN_ALIGNMENT_C = 7,
    PREF_MIN_ALIGNMENT_D = 8,
};

struct LtTable {
    size_t (*cublasLtGetVersion)() = nullptr;
    cublasStatus_t (*cublasLtCreate)(cublasLtHandle_t*) = nullptr;
    cublasStatus_t (*cublasLtMatmulDescCreate)(cublasLtMatmulDesc_t*, int, int) = nullptr;
    cublasStatus_t (*cublasLtMatmulDescSetAttribute)(cublasLtMatmulDesc_t, int, const void*,
                                                     size_t) = nullptr;
    cublasStatus_t (*cublasLtMatrixLayoutCreate)(cublasLtMatrixLayout_t*, int, uint64_t, uint64_t,
                                                 int64_t) = nullptr;
    cublasStatus_t (*cublasLtMatrixLayoutSetAttribute)(cublasLtMatrixLayout_t, int, const void*,
                                                       size_t) = nullptr;
    cublasStatus_t (*cublasLtMatmulPreferenceCreate)(cublasLtMatmulPreference_t*) = nullptr;
    cublasStatus_t (*cublasLtMatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t, int,
                                                           const void*, size_t) = nullptr;
    cublasStatus_t (*cublasLtMatmulPreferenceDestroy)(cublasLtMatmulPreference_t) = nullptr;
    cublasStatus_t (*cublasLtMatmulAlgoGetHeuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                     cublasLtMatmulPreference_t, int,
                                                     cublasLtMatmulHeuristicResult_t*,
                                                     int*) = nullptr;
    cublasStatus_t (*cublasLtMatmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*,
                                     const void*, cublasLtMatrixLayout_t, const void*,
                                     cublasLtMatrixLayout_t, const void*, const void*,
                                     cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,
                                     const cublasLtMatmulAlgo_t*, void*, size_t,
                                     CUstream) = nullptr;
    // Optional: describes algorithms (cublaslt_plans(), and reusing a timed choice for a nearby
    // M, which is skipped without it).
    cublasStatus_t (*cublasLtMatmulAlgoConfigGetAttribute)(const cublasLtMatmulAlgo_t*, int, void*,
                                                           size_t, size_t*) = nullptr;
};

// cublasLtMatmulAlgoConfigAttributes_t values read by describe(), all 32-bit.
enum : int {
    ALGO_ID = 0,
    ALGO_TILE_ID = 1,
    ALGO_SPLITK_NUM = 2,
    ALGO_REDUCTION_SCHEME = 3,
    ALGO_CTA_SWIZZLING = 4,
    ALGO_CUSTOM_OPTION = 5,
    ALGO_STAGES_ID = 6,
};

constexpr uint64_t kWorkspaceBytes = 32ull << 20;

// Guards loading and the per-device plan and workspace maps. `g_loaded` is also read without it
// (every matmul asks): it is set once, after `g_lt` is complete.
std::mutex g_mutex;
CublasLtLoadResult g_result;
LtTable g_lt;
std::atomic<bool> g_loaded{false};

const char* status_name(cublasStatus_t s) {
    switch (s) {
        case 1:
            return "CUBLAS_STATUS_NOT_INITIALIZED";
        case 3:
            return "CUBLAS_STATUS_ALLOC_FAILED";
        case 7:
            return "CUBLAS_STATUS_INVALID_VALUE";
        case 8:
            return "CUBLAS_STATUS_ARCH_MISMATCH";
        case 11:
            return "CUBLAS_STATUS_MAPPING_ERROR";
        case 13:
            return "CUBLAS_STATUS_EXECUTION_FAILED";
        case 14:
            return "CUBLAS_STATUS_INTERNAL_ERROR";
        case 15:
            return "CUBLAS_STATUS_NOT_SUPPORTED";
        default:
            return "CUBLAS_STATUS_UNKNOWN";
    }
}

void check_lt(cublasStatus_t s, const char* what) {
    if (s != 0) throw CudaError(s, status_name(s), std::string(what) + " failed");
}

// Everything cuBLASLt needs for one problem shape, made once under g_mutex and shared by every
// thread that runs that shape. The descriptor, layouts and candidates are never written after
// the plan is published (cublasLtMatmul only reads them); the one thing that changes later, the
// tuned choice, is an index written once by the single thread that claimed the tuning.
struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    // The problem, for cublaslt_plans().
    DType dtype = DType::f32;
    bool tf32 = false;
    int64_t m = 0, n = 0, k = 0, batch = 0;
    // The heuristic's best candidates that can run, best first; empty when none was found.
    std::vector<cublasLtMatmulAlgo_t> candidates;
    // What the timed pass measured per candidate (GPU and host microseconds per call; negative:
    // could not run). Written under g_mutex once the pass is done; empty until then.
    std::vector<std::pair<float, float>> timings;
    // Index into `candidates` of the algorithm to run: the heuristic's first until a timed pass
    // over them (large problems, once, outside graph capture) stores the fastest.
    std::atomic<size_t> chosen{0};
    // Set by the thread that tunes this plan (or at creation when there is nothing to tune), so
    // that exactly one thread times the candidates.
    std::atomic<bool> tuning_claimed{false};
    // Whether `chosen` was taken from a timed plan of the same family (see DeviceState).
    bool inherited = false;

    const cublasLtMatmulAlgo_t& algo() const {
        return candidates[chosen.load(std::memory_order_acquire)];
    }
};

// What a plan depends on: dtype, TF32, m, n, k, batch, each operand's transpose, leading
// dimension and batch stride, and the alignments. Hashed and compared as integers, so that a
// call formats no string (this lookup runs on every matmul).
struct PlanKey {
    std::array<int64_t, 17> v;
    bool operator==(const PlanKey& o) const { return v == o.v; }
};

struct PlanKeyHash {
    size_t operator()(const PlanKey& key) const {
        uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
        for (int64_t x : key.v) {
            h ^= static_cast<uint64_t>(x);
            h *= 1099511628211ull;
        }
        return static_cast<size_t>(h);
    }
};

// The heuristic's order is a model's guess: at some shapes (1024^3 half precision on Hopper) its
// first choice ran 1.2-1.5x slower than what PyTorch's cuBLAS picked, so a plan keeps this many
// candidates and times them once.
constexpr int kCandidates = 16;
// Problems of at least this many multiply-adds (64^3) get one timed pass over the candidates (a
// host wait of a few milliseconds, once per shape); smaller ones take the heuristic's first
// choice. Host-bound sizes are timed too: cublasLtMatmul's host cost differs by candidate
// (8-13 us per call on an H200 host, more for a split-K one that enqueues a reduction), and at
// 64^3 the heuristic's first ran 0.8-0.9x PyTorch.
constexpr double kTuneMacs = 1ull << 18;
// Timed runs per candidate: fewer for large problems, whose runs are long and steady.
constexpr double kLargeMacs = 1ull << 33;
// Timed rounds over the candidates below kLargeMacs, each candidate keeping its fastest round.
// There the choice rests on a few microseconds of host time per call, which another process
// on the machine stretches for a while: one round let that noise pick the algorithm (bf16 64^3
// and 512^3 ran 0.95-1.03x PyTorch in one process and 0.66-0.79x in another).
constexpr int kSmallRounds = 3;
// A candidate within this fraction of the fastest is as good: the heuristic's order breaks ties.
constexpr float kTieFraction = 0.02f;

// The handle is shared by every thread: cuBLASLt functions are thread safe for one handle (we
// never change its configuration after creation). Plans are heap-allocated so the pointer a
// caller took under g_mutex stays valid while other threads insert.
// The configuration ids of an algorithm (what describe() reads): two candidates of plans for
// different M are the same kernel when these agree.
using AlgoConfig = std::array<int64_t, 7>;

struct DeviceState {
    cublasLtHandle_t handle = nullptr;
    std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
    // The timed choice of each family of plans: one key but for M, rounded to its power-of-two
    // bucket. A prompt of a new length then reuses the choice timed at a nearby length (when
    // the heuristic offers that algorithm again) instead of timing its candidates again.
    std::unordered_map<PlanKey, AlgoConfig, PlanKeyHash> families;
};

// The family of a plan key: M (its third value) replaced by its power-of-two bucket.
PlanKey family_of(PlanKey key) {
    int64_t bucket = 0;
    for (int64_t m = key.v[2]; m > 0; m >>= 1) ++bucket;
    key.v[2] = -bucket;
    return key;
}

// Never destroyed: handles and plans live for the process (static destruction would run after
// the Rust pool and the driver are gone).
DeviceState& device_state(int device) {
    static auto* states = new std::unique_ptr<DeviceState>[kMaxDevices];
    if (!states[device]) {
        auto s = std::make_unique<DeviceState>();
        bind_device(device);
        check_lt(g_lt.cublasLtCreate(&s->handle), "cublasLtCreate");
        states[device] = std::move(s);
    }
    return *states[device];
}

int lt_type(DType t) {
    switch (t) {
        case DType::f32:
            return CUDA_R_32F;
        case DType::f64:
            return CUDA_R_64F;
        case DType::f16:
            return CUDA_R_16F;
        default:
            return CUDA_R_16BF;
    }
}

// Largest power of two up to 16 dividing every value (cuBLASLt's alignment preference).
uint32_t alignment(std::initializer_list<uint64_t> values) {
    uint32_t a = 16;
    for (uint64_t v : values) {
        while (a > 1 && v % a != 0) a /= 2;
    }
    return a;
}

cublasLtMatrixLayout_t make_layout(int type, uint64_t rows, uint64_t cols, int64_t ld,
                                   int64_t batch, int64_t batch_stride) {
    cublasLtMatrixLayout_t l = nullptr;
    check_lt(g_lt.cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld),
             "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
        const int32_t count = static_cast<int32_t>(batch);
        check_lt(
            g_lt.cublasLtMatrixLayoutSetAttribute(l, LAYOUT_BATCH_COUNT, &count, sizeof(count)),
            "cublasLtMatrixLayoutSetAttribute");
        check_lt(g_lt.cublasLtMatrixLayoutSetAttribute(l, LAYOUT_STRIDED_BATCH_OFFSET,
                                                       &batch_stride, sizeof(batch_stride)),
                 "cublasLtMatrixLayoutSetAttribute");
    }
    return l;
}

// Holds the stream for `ns` nanoseconds on the GPU (the built-in delay_ns kernel), so that the
// work enqueued next is all queued before the GPU reaches it. False when the kernel is missing.
bool hold_stream(const StreamPtr& stream, unsigned long long ns) {
    static const BuiltinKernel kernel("delay", "delay_ns");
    try {
        LaunchConfig c;
        void* args[] = {&ns};
        launch_kernel(kernel.get(stream->device()), c, *stream, args);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

// Time each candidate on the caller's stream and publish the fastest. Each candidate runs once
// to warm up (and to drop one that cannot run here); then, per candidate, a short GPU delay, a
// start event, `reps` runs, a stop event: the delay lets the host enqueue all the runs before the
// GPU starts them, so the events bracket the GPU's time even for kernels shorter than a launch.
// The host time of the enqueues is measured too, and a candidate costs the larger of the two per
// call (an algorithm that enqueues a second kernel costs the host that launch). Below kLargeMacs
// this runs kSmallRounds times over the candidates and each keeps its fastest GPU and host
// times. One wait at the end. Skipped while the stream is being captured (a host wait would break
// the capture); the next uncaptured call tunes instead. True when this call timed the candidates.
// Only the thread that claims the plan's tuning runs this; others keep running the current choice
// meanwhile (timings taken while other threads share the stream are noisier, never wrong).
template <typename Enqueue>
bool tune(Plan& plan, const StreamPtr& stream, Enqueue&& enqueue) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    check(drv().cuStreamIsCapturing(stream->handle(), &capture), "cuStreamIsCapturing");
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE) return false;
    if (plan.tuning_claimed.exchange(true, std::memory_order_acq_rel)) return false;
    const size_t count = plan.candidates.size();
    const double macs = static_cast<double>(plan.m) * plan.n * plan.k * plan.batch;
    const int reps = macs >= kLargeMacs ? 3 : 10;
    const int rounds = macs >= kLargeMacs ? 1 : kSmallRounds;
    std::vector<char> runs(count, 0);
    for (size_t i = 0; i < count; ++i) runs[i] = enqueue(plan.candidates[i]) == 0;
    // Events of round r, candidate i: 2 * (r * count + i) and the one after it.
    std::vector<CUevent> events(2 * count * rounds, nullptr);
    for (CUevent& e : events) check(drv().cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    std::vector<std::vector<float>> host_us(count);
    using clock = std::chrono::steady_clock;
    // Rounds visit the candidates in turn, so a slow stretch of the host falls on several of
    // them and every candidate gets a round outside it.
    for (int round = 0; round < rounds; ++round) {
        for (size_t i = 0; i < count; ++i) {
            if (!runs[i]) continue;
            CUevent* pair = &events[2 * (round * count + i)];
            // 10 us of enqueue per run is a few times what one cublasLtMatmul call takes.
            hold_stream(stream, 10000ull * (reps + 1));
            drv().cuEventRecord(pair[0], stream->handle());
            const auto t0 = clock::now();
            bool ok = true;
            for (int r = 0; r < reps && ok; ++r) ok = enqueue(plan.candidates[i]) == 0;
            const auto t1 = clock::now();
            drv().cuEventRecord(pair[1], stream->handle());
            runs[i] = ok;
            host_us[i].push_back(std::chrono::duration<float, std::micro>(t1 - t0).count() /
                                 static_cast<float>(reps));
        }
    }
    CUresult r;
    {
        GilRelease nogil;
        r = drv().cuStreamSynchronize(stream->handle());
    }
    std::vector<std::pair<float, float>> timings(count, {-1.0f, -1.0f});
    float best_cost = 0.0f;
    for (size_t i = 0; i < count; ++i) {
        if (r != CUDA_SUCCESS || !runs[i]) continue;
        float gpu = -1.0f;
        for (int round = 0; round < rounds; ++round) {
            float ms = 0.0f;
            const CUevent* pair = &events[2 * (round * count + i)];
            if (drv().cuEventElapsedTime(&ms, pair[0], pair[1]) != CUDA_SUCCESS) continue;
            const float us = ms * 1000.0f / static_cast<float>(reps);
            if (gpu < 0.0f || us < gpu) gpu = us;
        }
        if (gpu < 0.0f || host_us[i].empty()) continue;
        timings[i] = {gpu, *std::min_element(host_us[i].begin(), host_us[i].end())};
        const float cost = std::max(timings[i].first, timings[i].second);
        if (best_cost == 0.0f || cost < best_cost) best_cost = cost;
    }
    for (CUevent e : events) drv().cuEventDestroy(e);
    size_t best_index = plan.chosen.load(std::memory_order_relaxed);
    for (size_t i = 0; i < count; ++i) {
        const float cost = std::max(timings[i].first, timings[i].second);
        if (timings[i].first >= 0.0f && cost <= best_cost * (1.0f + kTieFraction)) {
            best_index = i;  // the first in the heuristic's order among the fastest
            break;
        }
    }
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        plan.timings = std::move(timings);
    }
    plan.chosen.store(best_index, std::memory_order_release);
    return r == CUDA_SUCCESS;
}

// One algorithm's configuration, as cublaslt_plans() reports it (-1 where it cannot be read).
LtAlgoInfo describe(const cublasLtMatmulAlgo_t& algo) {
    LtAlgoInfo info;
    if (g_lt.cublasLtMatmulAlgoConfigGetAttribute == nullptr) return info;
    auto read = [&](int attr) -> int64_t {
        uint32_t v = 0;
        size_t written = 0;
        return g_lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) == 0
                   ? static_cast<int64_t>(v)
                   : -1;
    };
    info.algo_id = read(ALGO_ID);
    info.tile = read(ALGO_TILE_ID);
    info.stages = read(ALGO_STAGES_ID);
    info.splitk = read(ALGO_SPLITK_NUM);
    info.reduction = read(ALGO_REDUCTION_SCHEME);
    info.swizzle = read(ALGO_CTA_SWIZZLING);
    info.custom = read(ALGO_CUSTOM_OPTION);
    return info;
}

AlgoConfig config_of(const cublasLtMatmulAlgo_t& algo) {
    const LtAlgoInfo i = describe(algo);
    return {i.algo_id, i.tile, i.stages, i.splitk, i.reduction, i.swizzle, i.custom};
}

}  // namespace

CublasLtLoadResult load_cublaslt(const std::vector<std::string>& candidates) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_loaded.load(std::memory_order_relaxed)) return g_result;
    LoadAttempt attempt = open_first(candidates, "cublasLtMatmul");
    CublasLtLoadResult result;
    result.tried = attempt.tried;
    if (attempt.handle != nullptr) {
        LtTable t;
        bool complete = true;
#define PGK_RESOLVE_LT(name)                                                   \
    t.name = reinterpret_cast<decltype(t.name)>(dlsym(attempt.handle, #name)); \
    complete = complete && t.name != nullptr;
        PGK_RESOLVE_LT(cublasLtGetVersion)
        PGK_RESOLVE_LT(cublasLtCreate)
        PGK_RESOLVE_LT(cublasLtMatmulDescCreate)
        PGK_RESOLVE_LT(cublasLtMatmulDescSetAttribute)
        PGK_RESOLVE_LT(cublasLtMatrixLayoutCreate)
        PGK_RESOLVE_LT(cublasLtMatrixLayoutSetAttribute)
        PGK_RESOLVE_LT(cublasLtMatmulPreferenceCreate)
        PGK_RESOLVE_LT(cublasLtMatmulPreferenceSetAttribute)
        PGK_RESOLVE_LT(cublasLtMatmulPreferenceDestroy)
        PGK_RESOLVE_LT(cublasLtMatmulAlgoGetHeuristic)
        PGK_RESOLVE_LT(cublasLtMatmul)
#undef PGK_RESOLVE_LT
        t.cublasLtMatmulAlgoConfigGetAttribute =
            reinterpret_cast<decltype(t.cublasLtMatmulAlgoConfigGetAttribute)>(
                dlsym(attempt.handle, "cublasLtMatmulAlgoConfigGetAttribute"));
        if (complete) {
            g_lt = t;
            result.loaded = true;
            result.path = attempt.path;
            result.version = g_lt.cublasLtGetVersion();
            g_result = result;
            g_loaded.store(true, std::memory_order_release);
        } else {
            result.tried.emplace_back(attempt.path, "missing cublasLt entry points");
            dlclose(attempt.handle);
        }
    }
    return result;
}

bool cublaslt_loaded() { return g_loaded.load(std::memory_order_acquire); }

bool cublaslt_supports(DType dtype) {
    return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 ||
           dtype == DType::bf16;
}

LtWorkspacePtr cublaslt_workspace(const StreamPtr& stream) {
    if (!cublaslt_loaded()) throw std::runtime_error("cuBLASLt is not loaded");
    if (auto kept = std::static_pointer_cast<LtWorkspace>(stream->scratch())) return kept;
    const int device = stream->device();
    bind_device(device);
    // A block allocated while the stream is captured belongs to that graph's pool region
    // (released with the graph), so it is used for this call only and never kept.
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    check(drv().cuStreamIsCapturing(stream->handle(), &capture), "cuStreamIsCapturing");
    auto ws = std::make_shared<LtWorkspace>();
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        ws->buffer = Buffer::allocate(device, kWorkspaceBytes, stream);
        return ws;
    }
    // The kept block is ordered on a non-owning alias of the stream: a buffer keeps its stream
    // alive, and the stream keeps this workspace, so the stream itself would never be released
    // (nor its handle recycled, nor the 32 MiB returned) after the user dropped it.
    ws->buffer = Buffer::allocate(device, kWorkspaceBytes, Stream::wrap(stream->handle(), device));
    // Another thread may have kept one for this stream meanwhile: everyone uses that one (its
    // mutex is what orders their enqueues), and this block goes back to the pool with `ws`.
    return std::static_pointer_cast<LtWorkspace>(stream->keep_scratch(ws));
}

bool cublaslt_matmul(DType dtype, bool tf32, int64_t m, int64_t n, int64_t k, int64_t batch,
                     const LtOperand& a, const LtOperand& b, uint64_t c, int64_t ldc,
                     int64_t batch_c, LtWorkspace& workspace, const StreamPtr& stream) {
    if (!cublaslt_loaded()) throw std::runtime_error("cuBLASLt is not loaded");
    const int device = stream->device();
    const int item = itemsize(dtype);
    // Row-major C = A @ B is column-major C^T = B^T @ A^T: cuBLASLt's first operand is our B,
    // its second our A. A row-major operand read column-major is its transpose (OP_N here); a
    // column-major one (a transposed view) needs OP_T.
    const int trans_b = b.col_major ? OP_T : OP_N;  // cuBLASLt "A"
    const int trans_a = a.col_major ? OP_T : OP_N;  // cuBLASLt "B"
    const uint32_t align_b =
        alignment({b.ptr, uint64_t(b.ld) * item, uint64_t(b.batch_stride) * item});
    const uint32_t align_a =
        alignment({a.ptr, uint64_t(a.ld) * item, uint64_t(a.batch_stride) * item});
    const uint32_t align_c = alignment({c, uint64_t(ldc) * item, uint64_t(batch_c) * item});
    const PlanKey key{{static_cast<int64_t>(dtype), tf32 ? 1 : 0, m, n, k, batch, trans_b, b.ld,
                       b.batch_stride, trans_a, a.ld, a.batch_stride, ldc, batch_c, align_a,
                       align_b, align_c}};
    bind_device(device);
    DeviceState* state;
    Plan* plan;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        state = &device_state(device);
        auto it = state->plans.find(key);
        if (it == state->plans.end()) {
            auto made = std::make_unique<Plan>();
            Plan& p = *made;
            p.dtype = dtype;
            p.tf32 = tf32;
            p.m = m;
            p.n = n;
            p.k = k;
            p.batch = batch;
            const int type = lt_type(dtype);
            const int compute = dtype == DType::f64             ? COMPUTE_64F
                                : (dtype == DType::f32 && tf32) ? COMPUTE_32F_FAST_TF32
                                                                : COMPUTE_32F;
            const int scale = dtype == DType::f64 ? CUDA_R_64F : CUDA_R_32F;
            check_lt(g_lt.cublasLtMatmulDescCreate(&p.desc, compute, scale),
                     "cublasLtMatmulDescCreate");
            check_lt(
                g_lt.cublasLtMatmulDescSetAttribute(p.desc, DESC_TRANSA, &trans_b, sizeof(int)),
                "cublasLtMatmulDescSetAttribute");
            check_lt(
                g_lt.cublasLtMatmulDescSetAttribute(p.desc, DESC_TRANSB, &trans_a, sizeof(int)),
                "cublasLtMatmulDescSetAttribute");
            // cuBLASLt "A" = B^T (n x k): stored as (n x k) when row-major, (k x n) when not.
            p.a = b.col_major ? make_layout(type, k, n, b.ld, batch, b.batch_stride)
                              : make_layout(type, n, k, b.ld, batch, b.batch_stride);
            p.b = a.col_major ? make_layout(type, m, k, a.ld, batch, a.batch_stride)
                              : make_layout(type, k, m, a.ld, batch, a.batch_stride);
            p.c = make_layout(type, n, m, ldc, batch, batch_c);
            cublasLtMatmulPreference_t pref = nullptr;
            check_lt(g_lt.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
            const uint64_t ws = kWorkspaceBytes;
            g_lt.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE_BYTES, &ws,
                                                      sizeof(ws));
            g_lt.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MIN_ALIGNMENT_A, &align_b,
                                                      sizeof(uint32_t));
            g_lt.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MIN_ALIGNMENT_B, &align_a,
                                                      sizeof(uint32_t));
            g_lt.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MIN_ALIGNMENT_C, &align_c,
                                                      sizeof(uint32_t));
            g_lt.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MIN_ALIGNMENT_D, &align_c,
                                                      sizeof(uint32_t));
            cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
            int found = 0;
            const cublasStatus_t s = g_lt.cublasLtMatmulAlgoGetHeuristic(
                state->handle, p.desc, p.a, p.b, p.c, p.c, pref, kCandidates, results, &found);
            g_lt.cublasLtMatmulPreferenceDestroy(pref);
            if (s == 0) {
                for (int i = 0; i < found; ++i) {
                    if (results[i].state == 0) p.candidates.push_back(results[i].algo);
                }
            }
            bool tune_worth_it =
                p.candidates.size() > 1 && static_cast<double>(m) * n * k * batch >= kTuneMacs;
            if (tune_worth_it) {
                auto family = state->families.find(family_of(key));
                for (size_t i = 0; family != state->families.end() && i < p.candidates.size();
                     ++i) {
                    if (family->second[0] >= 0 && config_of(p.candidates[i]) == family->second) {
                        p.chosen.store(i, std::memory_order_relaxed);
                        p.inherited = true;
                        tune_worth_it = false;
                        break;
                    }
                }
            }
            p.tuning_claimed.store(!tune_worth_it, std::memory_order_relaxed);
            it = state->plans.emplace(key, std::move(made)).first;
        }
        plan = it->second.get();
    }
    if (plan->candidates.empty()) return false;
    const uint64_t ws_ptr = workspace.buffer->ptr();
    const float one32 = 1.0f, zero32 = 0.0f;
    const double one64 = 1.0, zero64 = 0.0;
    const void* alpha = dtype == DType::f64 ? static_cast<const void*>(&one64) : &one32;
    const void* beta = dtype == DType::f64 ? static_cast<const void*>(&zero64) : &zero32;
    const pgk_api& api = rust_api();
    auto enqueue = [&](const cublasLtMatmulAlgo_t& algo) {
        // A launch: kept by a thread whose launches keep the GIL (core/gil.hpp).
        GilRelease nogil(!t_launches_keep_gil);
        // Held across the whole call: its kernels must reach the stream without another
        // thread's kernels over the same workspace between them. Taken without the GIL and
        // before the ticket (nothing waits for the GIL or for a ticket while holding it; the
        // workspace is the stream's, and a thread that keeps the GIL launches on its own).
        std::lock_guard<std::mutex> exclusive(workspace.enqueue);
        DispatchTicket ticket(api, device, stream->id());
        const cublasStatus_t s = g_lt.cublasLtMatmul(
            state->handle, plan->desc, alpha, reinterpret_cast<void*>(b.ptr), plan->a,
            reinterpret_cast<void*>(a.ptr), plan->b, beta, reinterpret_cast<void*>(c), plan->c,
            reinterpret_cast<void*>(c), plan->c, &algo, reinterpret_cast<void*>(ws_ptr),
            kWorkspaceBytes, stream->handle());
        ticket.end(s == 0);
        return s;
    };
    if (!plan->tuning_claimed.load(std::memory_order_acquire) && tune(*plan, stream, enqueue)) {
        std::lock_guard<std::mutex> lock(g_mutex);
        state->families[family_of(key)] = config_of(plan->algo());
    }
    check_lt(enqueue(plan->algo()), "cublasLtMatmul");
    return true;
}

std::vector<LtPlanInfo> cublaslt_plans(int device) {
    std::vector<LtPlanInfo> out;
    if (!cublaslt_loaded()) return out;
    std::lock_guard<std::mutex> lock(g_mutex);
    DeviceState& state = device_state(device);
    for (const auto& [key, plan] : state.plans) {
        LtPlanInfo info;
        info.dtype = plan->dtype;
        info.tf32 = plan->tf32;
        info.m = plan->m;
        info.n = plan->n;
        info.k = plan->k;
        info.batch = plan->batch;
        info.chosen = static_cast<int64_t>(plan->chosen.load(std::memory_order_acquire));
        info.tuned = !plan->timings.empty();
        info.inherited = plan->inherited;
        for (size_t i = 0; i < plan->candidates.size(); ++i) {
            LtAlgoInfo a = describe(plan->candidates[i]);
            if (i < plan->timings.size()) {
                a.gpu_us = plan->timings[i].first;
                a.host_us = plan->timings[i].second;
            }
            info.candidates.push_back(a);
        }
        out.push_back(std::move(info));
    }
    return out;
}

}  // namespace pgk
