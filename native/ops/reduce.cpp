#include "ops/reduce.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/launch.hpp"
#include "core/residency.hpp"
#include "jit/builtin.hpp"
#include "ops/copy.hpp"
#include "ops/strided.hpp"

namespace pgk {

namespace {

constexpr unsigned kThreads = 256;  // every kernel of these families runs 256-thread blocks

// The entry point `name` of kernel file `module`, made once per name.
const BuiltinKernel& kernel(const char* module, const std::string& name) {
    static std::mutex mutex;
    static std::unordered_map<std::string, std::unique_ptr<BuiltinKernel>> kernels;
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = kernels[name];
    if (!slot) slot = std::make_unique<BuiltinKernel>(module, name);
    return *slot;
}

int sm_count(int device) {
    static int counts[kMaxDevices] = {0};
    if (counts[device] == 0) counts[device] = device_info(device).sm_count;
    return counts[device];
}

// How many 256-thread blocks of `f` one SM holds at once (registers and threads; shared memory
// is small): splits are sized to one full wave, so no SM idles through a tail.
long long blocks_per_sm(CUfunction f, int device) {
    static std::mutex mutex;
    static std::unordered_map<CUfunction, long long> cache;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(f);
    if (it != cache.end()) return it->second;
    int regs = 32;
    bind_device(device);
    check(drv().cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f), "cuFuncGetAttribute");
    const DeviceInfo info = device_info(device);
    // SM 8.6/8.7/8.9 and 12.x hold 1536 threads, 8.0/9.0/10.x 2048.
    const bool small_sm = (info.sm_major == 8 && info.sm_minor > 0) || info.sm_major == 12;
    const long long by_threads = (small_sm ? 1536 : 2048) / kThreads;
    const long long regs_per_block =
        static_cast<long long>((std::max(regs, 1) + 7) / 8 * 8) * kThreads;
    const long long by_regs = std::max(1LL, 65536 / regs_per_block);
    return cache[f] = std::min(by_threads, by_regs);
}

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// Columns per block: 1 when the reduced axis is the innermost, else up to a warp's worth.
int columns_per_block(long long I) {
    int tx = 1;
    while (tx < 32 && tx < I) tx *= 2;
    return tx;
}

// Threads along R per output: all the block's other threads when I > 1; for rows (I == 1)
// about one per 8 elements, a warp to a block, so short rows share a block (a warp each).
int threads_along(long long R, int tx) {
    if (tx > 1) return static_cast<int>(kThreads) / tx;
    const long long want = ceil_div(R, 8);
    int ty = 32;
    while (ty < static_cast<int>(kThreads) && ty < want) ty *= 2;
    return ty;
}

unsigned grid_blocks(long long blocks, const char* what) {
    if (blocks > 0x7fffffffLL) {
        throw std::invalid_argument(std::string(what) + ": the array is too large for one launch");
    }
    return static_cast<unsigned>(std::max(1LL, blocks));
}

DType sum_acc(DType t) {
    switch (t) {
        case DType::f64:
            return DType::f64;
        case DType::f32:
        case DType::f16:
        case DType::bf16:
            return DType::f32;
        default:
            return DType::i64;
    }
}

DType ordered_acc(DType t) { return t == DType::f16 || t == DType::bf16 ? DType::f32 : t; }

// The source of a reduction as a C-contiguous [O, R, I] block, and where each kept axis of the
// input lands in the kernel's [O, I] output.
struct Plan {
    Array src;
    long long O = 1, R = 1, I = 1;
    Dims out_shape;         // the kept axes, in the input's order
    Dims out_elem_strides;  // their element strides in the kernel's output
};

struct Dim {
    int64_t extent;
    int64_t stride;  // bytes, in the current source
    bool reduced;
    int axis;
};

Plan plan_reduction(const Array& a, const std::vector<bool>& reduced, const StreamPtr& stream) {
    const int nd = a.ndim();
    std::vector<Dim> dims;
    for (int d = 0; d < nd; ++d) {
        if (a.shape()[d] != 1) dims.push_back({a.shape()[d], a.strides()[d], reduced[d], d});
    }
    // A permutation of a C-contiguous block (a transposed view, say) is used as it is, in memory
    // order; anything else is packed first.
    std::vector<Dim> mem = dims;
    std::stable_sort(mem.begin(), mem.end(),
                     [](const Dim& x, const Dim& y) { return x.stride > y.stride; });
    bool packed = true;
    int64_t expect = a.itemsize();
    for (auto it = mem.rbegin(); it != mem.rend(); ++it) {
        if (it->stride != expect) packed = false;
        expect *= it->extent;
    }
    Array src = a;
    if (!packed) {
        src = contiguous(a, stream);
        mem = dims;
        int64_t s = a.itemsize();
        for (auto it = mem.rbegin(); it != mem.rend(); ++it) {
            it->stride = s;
            s *= it->extent;
        }
    }
    // Reduced axes not adjacent in memory: copy with the kept axes first, the reduced last.
    int groups = 0;
    for (size_t k = 0; k < mem.size(); ++k) {
        if (mem[k].reduced && (k == 0 || !mem[k - 1].reduced)) ++groups;
    }
    if (groups > 1) {
        std::vector<Dim> order;
        for (const Dim& d : mem) {
            if (!d.reduced) order.push_back(d);
        }
        for (const Dim& d : mem) {
            if (d.reduced) order.push_back(d);
        }
        Dims shape, src_strides;
        for (const Dim& d : order) {
            shape.push_back(d.extent);
            src_strides.push_back(d.stride);
        }
        Array packed_copy = Array::empty(shape, src.dtype(), stream);
        make_resident(stream, {&packed_copy, &src});
        strided_copy(packed_copy.data_ptr(), packed_copy.strides(), src.data_ptr(), src_strides,
                     shape, src.itemsize(), *stream);
        src.buffer()->used_on(stream);
        src = packed_copy;
        mem = order;
    }
    Plan p{src, 1, 1, 1, {}, {}};
    bool seen_reduced = false;
    for (const Dim& d : mem) {
        if (d.reduced) {
            p.R *= d.extent;
            seen_reduced = true;
        } else if (seen_reduced) {
            p.I *= d.extent;
        } else {
            p.O *= d.extent;
        }
    }
    // Element strides of the kept axes in the kernel's output (contiguous in memory order).
    Dims stride_of(nd, 0);
    int64_t s = 1;
    for (auto it = mem.rbegin(); it != mem.rend(); ++it) {
        if (it->reduced) continue;
        stride_of[it->axis] = s;
        s *= it->extent;
    }
    for (int d = 0; d < nd; ++d) {
        if (reduced[d]) continue;
        p.out_shape.push_back(a.shape()[d]);
        p.out_elem_strides.push_back(stride_of[d]);
    }
    return p;
}

struct Launch {
    std::string op;
    DType in_type;
    uint64_t in = 0, in_idx = 0, center = 0;
    DType acc;
    uint64_t out = 0, out_idx = 0;
    long long O = 1, R = 1, I = 1, S = 1, chunk = 1;
    int tx = 1, ty = kThreads, vec = 0;
    double scale = 1.0;
    int post = 0;
};

void launch_reduce(const Launch& l, const Stream& stream) {
    const BuiltinKernel& k = kernel("reduce", "reduce_" + l.op + "_" + kernel_suffix(l.in_type));
    LaunchConfig c;
    c.block[0] = kThreads;
    const long long groups = kThreads / (l.tx * l.ty);
    c.grid[0] = grid_blocks(ceil_div(l.O, groups) * ceil_div(l.I, l.tx), "reduce");
    c.grid[1] = static_cast<unsigned>(l.S);
    uint64_t in = l.in, in_idx = l.in_idx, center = l.center, out = l.out, out_idx = l.out_idx;
    long long O = l.O, R = l.R, I = l.I, chunk = l.chunk;
    int tx = l.tx, ty = l.ty, vec = l.vec, post = l.post;
    double scale = l.scale;
    void* args[] = {&in, &in_idx, &center, &out, &out_idx, &O,     &R,
                    &I,  &chunk,  &tx,     &ty,  &vec,     &scale, &post};
    launch_kernel(k.get(stream.device()), c, stream, args);
}

const char* combine_op(const std::string& op) {
    if (op == "sum" || op == "sumf" || op == "sqdev") return "sum";
    if (op == "prod") return "prod";
    if (op == "max") return "max";
    if (op == "min") return "min";
    if (op == "argmax") return "argmax";
    if (op == "argmin") return "argmin";
    if (op == "all") return "all";
    return "any";
}

// One reduction of the plan's [O, R, I] with kernel op `op` into [O, I] of type `acc` (and the
// int64 indices for argmax/argmin): one pass when the output has enough blocks to fill the GPU,
// else per-block partials over S splits of R and a combining pass.
std::pair<Array, Array> run(const Plan& p, const std::string& op, DType acc, uint64_t center,
                            double scale, int post, const StreamPtr& stream) {
    const bool arg = op == "argmax" || op == "argmin";
    const DType in_type = p.src.dtype();
    const int isz = p.src.itemsize();
    const int tx = columns_per_block(p.I);
    const int ty = threads_along(p.R, tx);
    const long long base = ceil_div(p.O, kThreads / (tx * ty)) * ceil_div(p.I, tx);
    // The alignment from the buffer's current address without reading data_ptr() (not resident
    // yet): pool blocks are 512-byte aligned wherever a restore puts them, and external buffers
    // never move, so the address modulo 16 is fixed.
    const bool vec = p.I == 1 && !arg && isz >= 2 &&
                     (p.src.buffer()->ptr() + p.src.offset()) % 16 == 0 && (p.R * isz) % 16 == 0;
    const long long V = vec ? 16 / isz : 1;
    // One full wave of blocks; each split keeps at least 16 steps of the block's threads.
    const int device = stream->device();
    const CUfunction first =
        kernel("reduce", "reduce_" + op + "_" + kernel_suffix(in_type)).get(device);
    const long long target = sm_count(device) * blocks_per_sm(first, device);
    const long long min_chunk = ty * 16 * V;
    long long S = 1;
    if (base < target) S = std::min(ceil_div(target, base), std::max(1LL, p.R / min_chunk));
    S = std::min(S, 65535LL);
    long long chunk = ceil_div(p.R, S);
    if (vec && S > 1) {
        // Splits in whole steps of the kernel's vector loop (U vectors a thread, U = 8 for 4- and
        // 8-byte types, 4 for 2-byte ones: reduce.cu), so only the last split has leftover
        // vectors, which the loop reads one at a time (a memory latency each, up to U - 1 of
        // them: ~5 us on a 24 us sum of 16M floats when every split had them).
        const long long step = (isz >= 4 ? 8 : 4) * ty * V;
        chunk = ceil_div(chunk, step) * step;
    } else if (vec) {
        chunk = ceil_div(chunk, V) * V;
    }
    S = ceil_div(p.R, chunk);

    Launch l;
    l.op = op;
    l.in_type = in_type;
    l.center = center;
    l.acc = acc;
    l.O = p.O;
    l.R = p.R;
    l.I = p.I;
    l.S = S;
    l.chunk = chunk;
    l.tx = tx;
    l.ty = ty;
    l.vec = vec ? 1 : 0;
    Array out = Array::empty({p.O * p.I}, acc, stream);
    // Index outputs only for argmax/argmin (otherwise `out` stands in and is never written).
    Array out_idx = arg ? Array::empty({p.O * p.I}, DType::i64, stream) : out;
    // Partials for S > 1 (otherwise `out` stands in), allocated before any address is read.
    Array part = S > 1 ? Array::empty({p.O * S * p.I}, acc, stream) : out;
    Array part_idx = arg && S > 1 ? Array::empty({p.O * S * p.I}, DType::i64, stream) : part;
    make_resident(stream, {&p.src, &out, &out_idx, &part, &part_idx});
    l.in = p.src.data_ptr();
    if (S == 1) {
        l.out = out.data_ptr();
        l.out_idx = arg ? out_idx.data_ptr() : 0;
        l.scale = scale;
        l.post = post;
        launch_reduce(l, *stream);
    } else {
        l.out = part.data_ptr();
        l.out_idx = arg ? part_idx.data_ptr() : 0;
        launch_reduce(l, *stream);
        Launch c = l;
        c.op = combine_op(op);
        c.in_type = acc;
        c.in = part.data_ptr();
        c.in_idx = arg ? part_idx.data_ptr() : 0;
        c.center = 0;
        c.R = S;
        c.S = 1;
        c.chunk = S;
        c.ty = threads_along(S, tx);
        c.vec = 0;
        c.out = out.data_ptr();
        c.out_idx = arg ? out_idx.data_ptr() : 0;
        c.scale = scale;
        c.post = post;
        launch_reduce(c, *stream);
    }
    p.src.buffer()->used_on(stream);
    return {out, out_idx};
}

Array shaped(const Array& flat, const Plan& p) {
    Dims strides;
    for (size_t k = 0; k < p.out_shape.size(); ++k) {
        strides.push_back(p.out_elem_strides[k] * flat.itemsize());
    }
    return flat.view(p.out_shape, strides, flat.offset());
}

// O (product of the axes before `axis`), R (its extent), I (product after).
void split_axis(const Dims& shape, int axis, long long& O, long long& R, long long& I) {
    O = 1;
    I = 1;
    for (int d = 0; d < axis; ++d) O *= shape[d];
    R = shape[axis];
    for (size_t d = axis + 1; d < shape.size(); ++d) I *= shape[d];
}

void check_axis(int axis, const Array& a, const char* what) {
    if (axis < 0 || axis >= a.ndim()) {
        throw std::invalid_argument(std::string(what) + ": axis " + std::to_string(axis) +
                                    " is out of range");
    }
}

}  // namespace

Array reduce(const std::string& op, const Array& a, const std::vector<int>& axes, int ddof,
             const StreamPtr& stream) {
    if (a.size() == 0) throw std::invalid_argument("reduce: the array is empty");
    std::vector<bool> reduced(a.ndim(), false);
    for (int ax : axes) {
        check_axis(ax, a, "reduce");
        if (reduced[ax]) throw std::invalid_argument("reduce: repeated axis");
        reduced[ax] = true;
    }
    if ((op == "argmax" || op == "argmin") && axes.size() != 1) {
        throw std::invalid_argument("reduce: argmax/argmin take exactly one axis");
    }
    // Bools are bytes 0/1: reduce them as uint8.
    const Array in = a.dtype() == DType::b1 ? a.view_dtype(DType::u8) : a;
    const DType t = in.dtype();
    const Plan p = plan_reduction(in, reduced, stream);
    const bool floating = is_floating(t);
    if (op == "sum" || op == "prod")
        return shaped(run(p, op, sum_acc(t), 0, 1.0, 0, stream).first, p);
    if (op == "max" || op == "min") {
        return shaped(run(p, op, ordered_acc(t), 0, 1.0, 0, stream).first, p);
    }
    if (op == "argmax" || op == "argmin") {
        return shaped(run(p, op, ordered_acc(t), 0, 1.0, 0, stream).second, p);
    }
    if (op == "all" || op == "any")
        return shaped(run(p, op, DType::u8, 0, 1.0, 0, stream).first, p);
    if (op == "mean" || op == "var" || op == "std") {
        const DType acc = floating ? sum_acc(t) : DType::f64;
        const std::string sum_op = floating ? "sum" : "sumf";
        Array mean = run(p, sum_op, acc, 0, 1.0 / static_cast<double>(p.R), 0, stream).first;
        if (op == "mean") return shaped(mean, p);
        const long long dof = std::max(0LL, p.R - static_cast<long long>(ddof));
        const double scale = dof > 0 ? 1.0 / static_cast<double>(dof) : 1.0 / 0.0;
        Array var = run(p, "sqdev", acc, mean.data_ptr(), scale, op == "std" ? 1 : 0, stream).first;
        mean.buffer()->used_on(stream);
        return shaped(var, p);
    }
    throw std::invalid_argument("reduce: unknown op '" + op + "'");
}

Array softmax(const Array& a, int axis, bool log, const StreamPtr& stream) {
    check_axis(axis, a, "softmax");
    if (!is_floating(a.dtype())) throw std::invalid_argument("softmax: needs a floating array");
    const Array src = contiguous(a, stream);
    Array out = Array::empty(a.shape(), a.dtype(), stream);
    if (a.size() > 0) {
        make_resident(stream, {&src, &out});
        long long O, R, I;
        split_axis(a.shape(), axis, O, R, I);
        int tx = columns_per_block(I);
        int ty = threads_along(R, tx);
        const BuiltinKernel& k = kernel(
            "softmax", std::string(log ? "log_softmax_" : "softmax_") + kernel_suffix(a.dtype()));
        LaunchConfig c;
        c.block[0] = kThreads;
        c.grid[0] = grid_blocks(ceil_div(O, kThreads / (tx * ty)) * ceil_div(I, tx), "softmax");
        uint64_t in_ptr = src.data_ptr(), out_ptr = out.data_ptr();
        void* args[] = {&in_ptr, &out_ptr, &O, &R, &I, &tx, &ty};
        launch_kernel(k.get(stream->device()), c, *stream, args);
    }
    src.buffer()->used_on(stream);
    return out;
}

namespace {

// One cumsum_<in> launch over [rows, R, I]: rows (I == 1) in segments of seg_len, each segment's
// total into `totals` when it is not 0.
void launch_cumsum(DType in_type, uint64_t in, uint64_t out, long long rows, long long R,
                   long long I, long long seg_len, uint64_t totals, const StreamPtr& stream) {
    const int device = stream->device();
    LaunchConfig c;
    if (I > 1) {
        c = launch_config_1d(static_cast<unsigned long long>(rows * I), device);
    } else {
        c.block[0] = kThreads;
        c.grid[0] = grid_blocks(
            std::min<long long>(rows * ceil_div(R, seg_len), sm_count(device) * 8LL), "cumsum");
    }
    const BuiltinKernel& k = kernel("scan", std::string("cumsum_") + kernel_suffix(in_type));
    void* args[] = {&in, &out, &rows, &R, &I, &seg_len, &totals};
    launch_kernel(k.get(device), c, *stream, args);
}

}  // namespace

Array cumsum(const Array& a, int axis, const StreamPtr& stream) {
    check_axis(axis, a, "cumsum");
    const Array in = a.dtype() == DType::b1 ? a.view_dtype(DType::u8) : a;
    const Array src = contiguous(in, stream);
    const DType out_type = is_floating(in.dtype()) ? in.dtype() : DType::i64;
    Array out = Array::empty(a.shape(), out_type, stream);
    if (a.size() > 0) {
        long long O, R, I;
        split_axis(a.shape(), axis, O, R, I);
        const int device = stream->device();
        // Few long rows: cut them into segments so every SM scans (a block per segment), then
        // scan the segment totals and add them back (three launches, a fixed order).
        constexpr long long kTile = 256 * 8;
        long long segs = 1;
        if (I == 1 && O < sm_count(device) * 4LL && R > 4 * kTile) {
            segs = std::min(ceil_div(sm_count(device) * 8LL, O), ceil_div(R, 2 * kTile));
        }
        const long long seg_len = ceil_div(ceil_div(R, segs), kTile) * kTile;
        segs = ceil_div(R, seg_len);
        if (segs == 1) {
            make_resident(stream, {&src, &out});
            launch_cumsum(in.dtype(), src.data_ptr(), out.data_ptr(), O, R, I, R, 0, stream);
        } else {
            const DType acc = sum_acc(in.dtype());
            Array totals = Array::empty({O, segs}, acc, stream);
            Array offsets = Array::empty({O, segs}, acc, stream);
            make_resident(stream, {&src, &out, &totals, &offsets});
            launch_cumsum(in.dtype(), src.data_ptr(), out.data_ptr(), O, R, 1, seg_len,
                          totals.data_ptr(), stream);
            launch_cumsum(acc, totals.data_ptr(), offsets.data_ptr(), O, segs, 1, segs, 0, stream);
            const BuiltinKernel& add =
                kernel("scan", std::string("cumsum_add_") + kernel_suffix(out_type));
            uint64_t out_ptr = out.data_ptr(), off_ptr = offsets.data_ptr();
            long long rows = O, len = seg_len;
            void* args[] = {&out_ptr, &off_ptr, &rows, &R, &len};
            launch_kernel(add.get(device),
                          launch_config_1d(static_cast<unsigned long long>(O * R), device), *stream,
                          args);
        }
    }
    src.buffer()->used_on(stream);
    return out;
}

Array take(const Array& a, const Array& indices, int axis, int mode, const StreamPtr& stream) {
    check_axis(axis, a, "take");
    if (indices.dtype() != DType::i64 || indices.ndim() != 1) {
        throw std::invalid_argument("take: indices must be a 1-D int64 array");
    }
    if (mode < 0 || mode > 2) throw std::invalid_argument("take: mode must be 0, 1 or 2");
    long long O, N, I;
    split_axis(a.shape(), axis, O, N, I);
    long long K = indices.size();
    Dims shape = a.shape();
    shape[axis] = K;
    Array out = Array::empty(shape, a.dtype(), stream);
    if (out.size() == 0) return out;
    if (N == 0) throw std::out_of_range("take: cannot take from an empty axis");
    const Array src = contiguous(a, stream);
    const Array idx = contiguous(indices, stream);
    const BuiltinKernel& k = kernel("gather", "take_" + std::to_string(a.itemsize()));
    make_resident(stream, {&src, &idx, &out});
    uint64_t in_ptr = src.data_ptr(), idx_ptr = idx.data_ptr(), out_ptr = out.data_ptr();
    int m = mode;
    void* args[] = {&in_ptr, &idx_ptr, &out_ptr, &O, &N, &K, &I, &m};
    launch_kernel(k.get(stream->device()),
                  launch_config_1d(static_cast<unsigned long long>(out.size()), stream->device()),
                  *stream, args);
    src.buffer()->used_on(stream);
    idx.buffer()->used_on(stream);
    return out;
}

Array tri(const Array& a, long long k, bool upper, const StreamPtr& stream) {
    if (a.ndim() < 2) throw std::invalid_argument("tri: needs at least 2 dimensions");
    Array out = Array::empty(a.shape(), a.dtype(), stream);
    if (a.size() == 0) return out;
    copy_device(out, a, stream);
    long long B = 1;
    for (int d = 0; d < a.ndim() - 2; ++d) B *= a.shape()[d];
    long long M = a.shape()[a.ndim() - 2], N = a.shape()[a.ndim() - 1];
    int up = upper ? 1 : 0;
    const BuiltinKernel& kern = kernel("gather", "tri_" + std::to_string(a.itemsize()));
    uint64_t ptr = out.data_ptr();
    void* args[] = {&ptr, &B, &M, &N, &k, &up};
    launch_kernel(kern.get(stream->device()),
                  launch_config_1d(static_cast<unsigned long long>(out.size()), stream->device()),
                  *stream, args);
    return out;
}

}  // namespace pgk
