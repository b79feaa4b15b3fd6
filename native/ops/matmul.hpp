// matmul: C[z] = A[z] @ B[z] over one batch dimension, on cuBLASLt when it is loaded (and the
// caller did not ask for the runtime's own kernels) or on the built-in GEMM kernels.
#pragma once

#include "core/array.hpp"

namespace pgk {

enum class GemmBackend { automatic, own, cublaslt };

// a (batch, m, k), b (batch, k, n) with any strides (batch stride 0 broadcasts; transposed views
// are read in place), out (batch, m, n) C-contiguous; all of one dtype and device. Python has
// already broadcast the batch dimensions and promoted the dtypes. float32 uses TF32 tensor cores
// only when allow_tf32 is set; float16/bfloat16 accumulate in fp32. On SM 9.0 the runtime's own
// TF32 path (wgmma) first repacks both operands K-major into pool scratch of (m + n) x k floats
// per batch item, freed in stream order after the call (falls back to mma.sync when the pool
// cannot hold it). Throws std::invalid_argument on inconsistent shapes or dtypes, before anything
// is enqueued.
void matmul(const Array& a, const Array& b, const Array& out, bool allow_tf32, GemmBackend backend,
            const StreamPtr& stream);

// Which implementation matmul would run for these operands ("cublaslt", "mma", "simt",
// "naive"): for tests and benchmarks.
const char* matmul_backend_name(DType dtype, bool allow_tf32, GemmBackend backend);

}  // namespace pgk
