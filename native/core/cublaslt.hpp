// cuBLASLt, opened with dlopen from the candidates pygpukit._environment lists (the
// nvidia-cublas wheel, CUDA_PATH, the system); never linked. Optional: without it matmul runs on
// the runtime's own kernels. One handle per device; matmul descriptors, layouts and the
// heuristic's candidate algorithms cached per problem key (immutable once made, so threads share
// them), the one to run chosen by a timed pass over them on first use (problems of 64^3
// multiply-adds and more; smaller ones run the heuristic's first; a plan whose M falls in the
// power-of-two bucket of a timed plan of the same other dimensions reuses its choice); a
// 32 MiB workspace per stream from the Rust pool, one call at a time on it (see LtWorkspace);
// every cublasLtMatmul enqueued through the dispatch controller like a kernel launch.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.hpp"
#include "core/dtype.hpp"
#include "core/stream.hpp"

namespace pgk {

struct CublasLtLoadResult {
    bool loaded = false;
    std::string path;
    std::vector<std::pair<std::string, std::string>> tried;
    uint64_t version = 0;  // cublasLtGetVersion(), e.g. 130100
};

// dlopen the first candidate exporting cublasLtMatmul; never throws. Loads once per process.
CublasLtLoadResult load_cublaslt(const std::vector<std::string>& candidates);
bool cublaslt_loaded();

// One operand of a row-major problem: element address, whether it is stored column-major (a
// transposed view) instead of row-major, its leading dimension and batch stride in elements.
struct LtOperand {
    uint64_t ptr = 0;
    bool col_major = false;
    int64_t ld = 0;
    int64_t batch_stride = 0;
};

// Whether cuBLASLt computes this dtype (float32, float16, bfloat16, float64).
bool cublaslt_supports(DType dtype);

// A stream's cuBLASLt workspace. One cublasLtMatmul may enqueue several kernels that pass data
// through the workspace (split-K partials, then their reduction), so two threads enqueueing on
// one stream at once must not interleave their launches over the same bytes: `enqueue` is held
// for the whole of each cublasLtMatmul call on this workspace. Kernels from different calls
// then run back to back on the stream, never interleaved.
struct LtWorkspace {
    BufferPtr buffer;
    std::mutex enqueue;
};
using LtWorkspacePtr = std::shared_ptr<LtWorkspace>;

// The stream's cuBLASLt workspace, kept on the Stream object from its first uncaptured matmul
// until that object goes (a block allocated while the stream is captured belongs to that graph's
// pool region and is not kept). Taken
// before the operands are made resident: allocating it may spill an evictable operand.
LtWorkspacePtr cublaslt_workspace(const StreamPtr& stream);

// C[z] = A[z] @ B[z], z < batch: A (m x k), B (k x n), C row-major (m x n) with row stride ldc
// and batch stride batch_c; fp32 accumulation for the half types, TF32 tensor cores for float32
// only when tf32 is set. Returns false (nothing enqueued) when the heuristic finds no algorithm.
bool cublaslt_matmul(DType dtype, bool tf32, int64_t m, int64_t n, int64_t k, int64_t batch,
                     const LtOperand& a, const LtOperand& b, uint64_t c, int64_t ldc,
                     int64_t batch_c, LtWorkspace& workspace, const StreamPtr& stream);

// One candidate algorithm of a plan: its configuration (cuBLASLt's algorithm, tile, stages,
// split-K count, reduction scheme, CTA swizzling and custom option ids; -1 where it cannot be
// read) and what the timed pass measured (microseconds per call; -1 when not timed or it could
// not run).
struct LtAlgoInfo {
    int64_t algo_id = -1, tile = -1, stages = -1, splitk = -1, reduction = -1, swizzle = -1,
            custom = -1;
    float gpu_us = -1.0f, host_us = -1.0f;
};

// One cached plan: the problem, its candidates in the heuristic's order, the one that runs.
struct LtPlanInfo {
    DType dtype = DType::f32;
    bool tf32 = false;
    int64_t m = 0, n = 0, k = 0, batch = 0;
    int64_t chosen = 0;
    bool tuned = false;      // chosen by timing this plan's candidates
    bool inherited = false;  // chosen as the timed choice of a plan for a nearby M
    std::vector<LtAlgoInfo> candidates;
};

// Every plan made so far on `device` (empty when cuBLASLt is not loaded): for tools and tests
// that show which algorithm a shape runs and why.
std::vector<LtPlanInfo> cublaslt_plans(int device);

}  // namespace pgk
