#include "ops/matmul.hpp"

#include <algorithm>
#include <atomic>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/cublaslt.hpp"
#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/errors.hpp"
#include "core/launch.hpp"
#include "core/residency.hpp"
#include "jit/builtin.hpp"
#include "ops/copy.hpp"
#include "ops/fill.hpp"

namespace pgk {

namespace {

// Mirrors GemmParams in native/kernels/gemm_*.cu.
struct GemmParams {
    uint64_t a, b, c;
    int m, n, k, batch;
    long long sam, sak, sbk, sbn;
    long long batch_a, batch_b, ldc;
    long long batch_c;
};

constexpr int kTile = 128;
constexpr long long kMaxGridZ = 65535;

// How cuBLASLt can read a (rows x cols) operand with element strides (srow, scol): row-major
// (cols contiguous), column-major (rows contiguous), or neither (false: copy it first). The
// address (op.ptr) is set by the caller once the operands are resident.
bool lt_operand(const Array& x, int item, LtOperand& op) {
    const int64_t rows = x.shape()[1], cols = x.shape()[2];
    const int64_t srow = x.strides()[1] / item, scol = x.strides()[2] / item;
    op.batch_stride = x.strides()[0] / item;
    if ((cols == 1 || scol == 1) && (rows == 1 || srow >= cols)) {
        op.col_major = false;
        op.ld = rows == 1 ? cols : srow;
    } else if ((rows == 1 || srow == 1) && (cols == 1 || scol >= rows)) {
        op.col_major = true;
        op.ld = cols == 1 ? rows : scol;
    } else {
        return false;
    }
    op.ld = std::max<int64_t>(op.ld, 1);
    // A broadcast batch (stride 0) or a negative stride is not something cuBLASLt promises to
    // read: such operands are made contiguous.
    return x.shape()[0] == 1 || op.batch_stride > 0;
}

bool run_cublaslt(const Array& a, const Array& b, const Array& out, bool tf32,
                  const StreamPtr& stream) {
    const int item = a.itemsize();
    const int64_t batch = a.shape()[0], m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
    LtOperand la, lb;
    Array ac = a, bc = b;
    if (!lt_operand(ac, item, la)) {
        ac = contiguous(a, stream);
        lt_operand(ac, item, la);
    }
    if (!lt_operand(bc, item, lb)) {
        bc = contiguous(b, stream);
        lt_operand(bc, item, lb);
    }
    if (batch == 1) la.batch_stride = lb.batch_stride = 0;
    // Every allocation of the call (copies above, the stream's workspace) before the operands are
    // made resident together and their addresses read.
    const LtWorkspacePtr workspace = cublaslt_workspace(stream);
    make_resident(stream, {&ac, &bc, &out});
    la.ptr = ac.data_ptr();
    lb.ptr = bc.data_ptr();
    const bool ok = cublaslt_matmul(a.dtype(), tf32, m, n, k, batch, la, lb, out.data_ptr(), n,
                                    m * n, *workspace, stream);
    ac.buffer()->used_on(stream);
    bc.buffer()->used_on(stream);
    return ok;
}

// wgmma (sm_90a): bf16/f16 with the operands the cp.async path takes, on SM 9.0 devices.
constexpr int kWgmmaBM = 128, kWgmmaBN = 256;
constexpr unsigned kWgmmaSmem = 4 * 48 * 1024 + 1024;  // 4 stages + 1 KiB to align the atoms

// `kernel` on `device`, allowed `smem` bytes of dynamic shared memory (set once per device:
// `configured` is the kernel's own flag array).
CUfunction with_dynamic_smem(const BuiltinKernel& kernel, int device, unsigned smem,
                             std::atomic<bool> (&configured)[kMaxDevices]) {
    CUfunction f = kernel.get(device);
    if (!configured[device].load(std::memory_order_acquire)) {
        check(drv().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       static_cast<int>(smem)),
              "cuFuncSetAttribute");
        configured[device].store(true, std::memory_order_release);
    }
    return f;
}

CUfunction wgmma_kernel(DType dtype, int device) {
    static const BuiltinKernel kernels[2] = {{"gemm_wgmma", "gemm_wgmma_bf16"},
                                             {"gemm_wgmma", "gemm_wgmma_f16"}};
    static std::atomic<bool> configured[2][kMaxDevices] = {};
    const int which = dtype == DType::bf16 ? 0 : 1;
    return with_dynamic_smem(kernels[which], device, kWgmmaSmem, configured[which]);
}

// TF32 on SM 9.0 (gemm_wgmma_tf32.cu): wgmma reads 32-bit operands K-major only, so both are
// first repacked K-major with K padded to whole 16-byte chunks, rounded to TF32 on the way
// (wgmma itself would truncate), into pool scratch: A as (m, kp), B transposed as (n, kp). The
// two passes move ~2 x (mk + kn) x 4 bytes, ~0.35 ms at 8192^3 against a ~4.5 ms product.
// Problems below kTf32MinWork multiply-adds keep the single-launch mma.sync kernel.
constexpr int kTf32BM = 128, kTf32BN = 256, kPackTile = 32, kPackRowsPerPass = 8;
constexpr unsigned kTf32Smem = 4 * 48 * 1024 + 1024;  // 4 stages + 1 KiB to align the atoms
constexpr long long kTf32MinWork = 1LL << 21;         // 128^3

// Mirrors PackParams in native/kernels/gemm_wgmma_tf32.cu.
struct PackParams {
    uint64_t src, dst;
    int rows, cols, cols_padded, batch;
    long long s_batch, s_row, s_col;
};

CUfunction wgmma_tf32_kernel(int device) {
    static const BuiltinKernel kernel("gemm_wgmma_tf32", "gemm_wgmma_tf32");
    static std::atomic<bool> configured[kMaxDevices] = {};
    return with_dynamic_smem(kernel, device, kTf32Smem, configured);
}

bool wgmma_tf32_takes(int64_t m, int64_t n, int64_t k, const StreamPtr& stream) {
    const int64_t kp = (k + 3) / 4 * 4;
    return m >= 64 && n >= 64 && static_cast<double>(m) * n * k >= kTf32MinWork &&
           (m + kTf32BM - 1) / kTf32BM <= 65535 && (kp + kPackTile - 1) / kPackTile <= 65535 &&
           compute_capability(stream->device()) == std::make_pair(9, 0);
}

// Enqueues pack_tf32_kmajor for x read as (batch, rows, cols) through element strides.
void pack_tf32(const Array& x, int64_t s_row, int64_t s_col, int rows, int cols, int batch,
               const Array& dst, const StreamPtr& stream) {
    static const BuiltinKernel kernel("gemm_wgmma_tf32", "pack_tf32_kmajor");
    PackParams p{};
    p.src = x.data_ptr();
    p.dst = dst.data_ptr();
    p.rows = rows;
    p.cols = cols;
    p.cols_padded = static_cast<int>(dst.shape()[2]);
    p.batch = batch;
    p.s_batch = batch == 1 ? 0 : x.strides()[0] / 4;
    p.s_row = s_row;
    p.s_col = s_col;
    LaunchConfig c;
    c.block[0] = kPackTile;
    c.block[1] = kPackRowsPerPass;
    c.grid[0] = static_cast<unsigned>((rows + kPackTile - 1) / kPackTile);
    c.grid[1] = static_cast<unsigned>((p.cols_padded + kPackTile - 1) / kPackTile);
    c.grid[2] = static_cast<unsigned>(std::min<long long>(batch, kMaxGridZ));
    void* args[] = {&p};
    launch_kernel(kernel.get(stream->device()), c, *stream, args);
}

// False (nothing enqueued) when the pool cannot hold the packed operands: the caller falls back
// to the mma.sync kernel, which needs no scratch.
bool run_wgmma_tf32(const Array& a, const Array& b, const Array& out, const StreamPtr& stream) {
    const int batch = static_cast<int>(a.shape()[0]);
    const int m = static_cast<int>(a.shape()[1]), k = static_cast<int>(a.shape()[2]);
    const int n = static_cast<int>(b.shape()[2]);
    const int64_t kp = (static_cast<int64_t>(k) + 3) / 4 * 4;
    // A broadcast operand (batch stride 0) is packed once and read with batch stride 0.
    const int batch_a = batch == 1 || a.strides()[0] == 0 ? 1 : batch;
    const int batch_b = batch == 1 || b.strides()[0] == 0 ? 1 : batch;
    std::optional<Array> scratch_a, scratch_b;
    try {
        scratch_a = Array::empty({batch_a, m, kp}, DType::f32, stream);
        scratch_b = Array::empty({batch_b, n, kp}, DType::f32, stream);
    } catch (const OutOfMemoryError&) {
        return false;
    }
    const Array& pa = *scratch_a;
    const Array& pb = *scratch_b;
    make_resident(stream, {&a, &b, &out, &pa, &pb});
    pack_tf32(a, a.strides()[1] / 4, a.strides()[2] / 4, m, k, batch_a, pa, stream);
    pack_tf32(b, b.strides()[2] / 4, b.strides()[1] / 4, n, k, batch_b, pb, stream);
    GemmParams p{};
    p.a = pa.data_ptr();
    p.b = pb.data_ptr();
    p.c = out.data_ptr();
    p.m = m;
    p.n = n;
    p.k = static_cast<int>(kp);
    p.batch = batch;
    p.sam = p.sbn = kp;
    p.sak = p.sbk = 1;
    p.batch_a = batch_a == 1 ? 0 : m * kp;
    p.batch_b = batch_b == 1 ? 0 : n * kp;
    p.ldc = n;
    p.batch_c = static_cast<long long>(m) * n;
    LaunchConfig c;
    c.block[0] = 256;
    c.grid[0] = static_cast<unsigned>((n + kTf32BN - 1) / kTf32BN);
    c.grid[1] = static_cast<unsigned>((m + kTf32BM - 1) / kTf32BM);
    c.grid[2] = static_cast<unsigned>(std::min<long long>(batch, kMaxGridZ));
    c.shared_mem = kTf32Smem;
    void* args[] = {&p};
    launch_kernel(wgmma_tf32_kernel(stream->device()), c, *stream, args);
    pa.buffer()->used_on(stream);
    pb.buffer()->used_on(stream);
    return true;
}

const BuiltinKernel& own_kernel(DType dtype, bool tf32, bool fast) {
    static const BuiltinKernel simt_f32("gemm_simt", "gemm_simt_f32");
    static const BuiltinKernel mma[3][2] = {
        {{"gemm_mma", "gemm_mma_tf32_generic"}, {"gemm_mma", "gemm_mma_tf32_fast"}},
        {{"gemm_mma", "gemm_mma_f16_generic"}, {"gemm_mma", "gemm_mma_f16_fast"}},
        {{"gemm_mma", "gemm_mma_bf16_generic"}, {"gemm_mma", "gemm_mma_bf16_fast"}},
    };
    static const BuiltinKernel naive[] = {
        {"gemm_simt", "gemm_naive_f64"}, {"gemm_simt", "gemm_naive_i8"},
        {"gemm_simt", "gemm_naive_i16"}, {"gemm_simt", "gemm_naive_i32"},
        {"gemm_simt", "gemm_naive_i64"}, {"gemm_simt", "gemm_naive_u8"},
        {"gemm_simt", "gemm_naive_b1"},
    };
    switch (dtype) {
        case DType::f32:
            return tf32 ? mma[0][fast] : simt_f32;
        case DType::f16:
            return mma[1][fast];
        case DType::bf16:
            return mma[2][fast];
        case DType::f64:
            return naive[0];
        case DType::i8:
            return naive[1];
        case DType::i16:
            return naive[2];
        case DType::i32:
            return naive[3];
        case DType::i64:
            return naive[4];
        case DType::u8:
            return naive[5];
        case DType::b1:
            return naive[6];
    }
    throw std::invalid_argument("matmul: unsupported dtype");
}

void run_own(const Array& a, const Array& b, const Array& out, bool tf32, const StreamPtr& stream) {
    if (tf32 && wgmma_tf32_takes(a.shape()[1], b.shape()[2], a.shape()[2], stream) &&
        run_wgmma_tf32(a, b, out, stream)) {
        return;
    }
    const int item = a.itemsize();
    make_resident(stream, {&a, &b, &out});
    GemmParams p{};
    p.a = a.data_ptr();
    p.b = b.data_ptr();
    p.c = out.data_ptr();
    p.batch = static_cast<int>(a.shape()[0]);
    p.m = static_cast<int>(a.shape()[1]);
    p.k = static_cast<int>(a.shape()[2]);
    p.n = static_cast<int>(b.shape()[2]);
    p.batch_a = a.shape()[0] == 1 ? 0 : a.strides()[0] / item;
    p.sam = a.strides()[1] / item;
    p.sak = a.strides()[2] / item;
    p.batch_b = b.shape()[0] == 1 ? 0 : b.strides()[0] / item;
    p.sbk = b.strides()[1] / item;
    p.sbn = b.strides()[2] / item;
    p.ldc = p.n;
    p.batch_c = static_cast<long long>(p.m) * p.n;
    const DType dtype = a.dtype();
    const bool mma = dtype == DType::f16 || dtype == DType::bf16 || (dtype == DType::f32 && tf32);
    LaunchConfig c;
    const unsigned gz = static_cast<unsigned>(std::min<long long>(p.batch, kMaxGridZ));
    bool fast = false;
    if (mma || dtype == DType::f32) {
        if (mma) {
            // cp.async copies 16 bytes along K of A and along N of B.
            const long long chunk = 16 / item;
            auto aligned = [&](long long elems) { return (elems * item) % 16 == 0; };
            fast = p.sak == 1 && p.sbn == 1 && p.k % chunk == 0 && p.n % chunk == 0 &&
                   p.a % 16 == 0 && p.b % 16 == 0 && aligned(p.sam) && aligned(p.sbk) &&
                   aligned(p.batch_a) && aligned(p.batch_b);
        }
        c.block[0] = 256;
        c.grid[0] = static_cast<unsigned>((p.n + kTile - 1) / kTile);
        c.grid[1] = static_cast<unsigned>((p.m + kTile - 1) / kTile);
    } else {
        c.block[0] = 16;
        c.block[1] = 16;
        c.grid[0] = static_cast<unsigned>((p.n + 15) / 16);
        c.grid[1] = static_cast<unsigned>((p.m + 15) / 16);
    }
    c.grid[2] = gz;
    void* args[] = {&p};
    if (fast && dtype != DType::f32 &&
        compute_capability(stream->device()) == std::make_pair(9, 0)) {
        c.grid[0] = static_cast<unsigned>((p.n + kWgmmaBN - 1) / kWgmmaBN);
        c.grid[1] = static_cast<unsigned>((p.m + kWgmmaBM - 1) / kWgmmaBM);
        c.shared_mem = kWgmmaSmem;
        if (c.grid[1] > 65535) throw std::invalid_argument("matmul: too many rows for one launch");
        launch_kernel(wgmma_kernel(dtype, stream->device()), c, *stream, args);
        return;
    }
    if (c.grid[1] > 65535) throw std::invalid_argument("matmul: too many rows for one launch");
    launch_kernel(own_kernel(dtype, tf32, fast).get(stream->device()), c, *stream, args);
}

}  // namespace

void matmul(const Array& a, const Array& b, const Array& out, bool allow_tf32, GemmBackend backend,
            const StreamPtr& stream) {
    if (a.ndim() != 3 || b.ndim() != 3 || out.ndim() != 3) {
        throw std::invalid_argument("matmul: the native call takes (batch, m, k) @ (batch, k, n)");
    }
    const int64_t batch = a.shape()[0], m = a.shape()[1], k = a.shape()[2], n = b.shape()[2];
    if (b.shape()[0] != batch || b.shape()[1] != k || out.shape()[0] != batch ||
        out.shape()[1] != m || out.shape()[2] != n) {
        throw std::invalid_argument("matmul: shapes do not match");
    }
    if (a.dtype() != b.dtype() || a.dtype() != out.dtype()) {
        throw std::invalid_argument(std::string("matmul: operands must share one dtype, got ") +
                                    dtype_name(a.dtype()) + ", " + dtype_name(b.dtype()) + " -> " +
                                    dtype_name(out.dtype()));
    }
    if (a.device() != stream->device() || b.device() != stream->device() ||
        out.device() != stream->device()) {
        throw std::invalid_argument("matmul: operands and stream must be on one device");
    }
    if (!out.is_c_contiguous()) throw std::invalid_argument("matmul: out must be C-contiguous");
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || batch > INT32_MAX) {
        throw std::invalid_argument("matmul: dimensions above 2^31 - 1 are not supported");
    }
    if (out.size() == 0) return;
    const bool tf32 = allow_tf32 && a.dtype() == DType::f32;
    if (k == 0) {
        // Sum over nothing: zeros (fill takes a Python number; the caller holds the GIL).
        fill(out, pybind11::int_(0), stream);
        return;
    }
    const bool lt = backend == GemmBackend::cublaslt ||
                    (backend == GemmBackend::automatic && cublaslt_loaded());
    bool done = false;
    if (lt && cublaslt_supports(a.dtype())) {
        if (backend == GemmBackend::cublaslt && !cublaslt_loaded()) {
            throw std::runtime_error("matmul: cuBLASLt was requested but is not loaded");
        }
        done = run_cublaslt(a, b, out, tf32, stream);
        if (!done && backend == GemmBackend::cublaslt) {
            throw std::runtime_error(
                "matmul: cuBLASLt found no algorithm for this problem (dtype " +
                std::string(dtype_name(a.dtype())) + ")");
        }
    }
    if (!done) run_own(a, b, out, tf32, stream);
    a.buffer()->used_on(stream);
    b.buffer()->used_on(stream);
    out.buffer()->used_on(stream);
}

const char* matmul_backend_name(DType dtype, bool allow_tf32, GemmBackend backend) {
    const bool lt = backend == GemmBackend::cublaslt ||
                    (backend == GemmBackend::automatic && cublaslt_loaded());
    if (lt && cublaslt_supports(dtype)) return "cublaslt";
    if (dtype == DType::f16 || dtype == DType::bf16 || (dtype == DType::f32 && allow_tf32)) {
        return "mma";
    }
    return dtype == DType::f32 ? "simt" : "naive";
}

}  // namespace pgk
