#include "ops/elementwise.hpp"

#include <array>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/launch.hpp"
#include "core/residency.hpp"
#include "core/stream.hpp"
#include "jit/builtin.hpp"
#include "ops/cast.hpp"
#include "ops/copy.hpp"
#include "ops/fill.hpp"
#include "ops/scalar.hpp"

namespace py = pybind11;

namespace pgk {

#define PGK_OP_NAME(op) #op,
const char* const kBinaryOpNames[kNumBinaryOps] = {PGK_BINARY_OPS(PGK_OP_NAME)};
const char* const kUnaryOpNames[kNumUnaryOps] = {PGK_UNARY_OPS(PGK_OP_NAME)};
#undef PGK_OP_NAME

namespace {

using D = DType;
constexpr int kScalarA = 1, kScalarB = 2, kContiguous = 4;

// NumPy's result_type over the runtime dtypes (order f64 f32 f16 bf16 i8 i16 i32 i64 u8 bool).
// bfloat16 follows ml_dtypes where it defines a result; where it does not, the smallest float
// that holds both (bfloat16 + float16 / int16 -> float32, + int32 / int64 -> float64).
constexpr D kPromote[kNumDTypes][kNumDTypes] = {
    {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
    {D::f64, D::f32, D::f32, D::f32, D::f32, D::f32, D::f64, D::f64, D::f32, D::f32},
    {D::f64, D::f32, D::f16, D::f32, D::f16, D::f32, D::f64, D::f64, D::f16, D::f16},
    {D::f64, D::f32, D::f32, D::bf16, D::bf16, D::f32, D::f64, D::f64, D::bf16, D::bf16},
    {D::f64, D::f32, D::f16, D::bf16, D::i8, D::i16, D::i32, D::i64, D::i16, D::i8},
    {D::f64, D::f32, D::f32, D::f32, D::i16, D::i16, D::i32, D::i64, D::i16, D::i16},
    {D::f64, D::f64, D::f64, D::f64, D::i32, D::i32, D::i32, D::i64, D::i32, D::i32},
    {D::f64, D::f64, D::f64, D::f64, D::i64, D::i64, D::i64, D::i64, D::i64, D::i64},
    {D::f64, D::f32, D::f16, D::bf16, D::i16, D::i16, D::i32, D::i64, D::u8, D::u8},
    {D::f64, D::f32, D::f16, D::bf16, D::i8, D::i16, D::i32, D::i64, D::u8, D::b1},
};

}  // namespace

D promote(D a, D b) { return kPromote[static_cast<int>(a)][static_cast<int>(b)]; }

namespace {

// NumPy's kinds in same_kind order: bool < unsigned < signed < float.
int kind(D t) {
    if (t == D::b1) return 0;
    if (t == D::u8) return 1;
    return is_floating(t) ? 3 : 2;
}

// The float type NumPy's math functions give an input (int8 -> float16, int32 -> float64, ...).
D float_of(D t) {
    switch (t) {
        case D::i8:
        case D::u8:
        case D::b1:
            return D::f16;
        case D::i16:
            return D::f32;
        case D::i32:
        case D::i64:
            return D::f64;
        default:
            return t;
    }
}

constexpr int kNumBinary = kNumBinaryOps;
constexpr int kNumUnary = kNumUnaryOps;

CUfunction binary_kernel(int op, D t, int device) {
    static const auto table = [] {
        std::array<std::unique_ptr<BuiltinKernel>, kNumBinary * kNumDTypes> k;
        for (int o = 0; o < kNumBinary; ++o)
            for (int d = 0; d < kNumDTypes; ++d)
                k[o * kNumDTypes + d] = std::make_unique<BuiltinKernel>(
                    "elementwise", std::string("ew_") + kBinaryOpNames[o] + "_" +
                                       kernel_suffix(static_cast<D>(d)));
        return k;
    }();
    return table[op * kNumDTypes + static_cast<int>(t)]->get(device);
}

CUfunction unary_kernel(int op, D t, int device) {
    static const auto table = [] {
        std::array<std::unique_ptr<BuiltinKernel>, kNumUnary * kNumDTypes> k;
        for (int o = 0; o < kNumUnary; ++o)
            for (int d = 0; d < kNumDTypes; ++d)
                k[o * kNumDTypes + d] = std::make_unique<BuiltinKernel>(
                    "elementwise",
                    std::string("un_") + kUnaryOpNames[o] + "_" + kernel_suffix(static_cast<D>(d)));
        return k;
    }();
    return table[op * kNumDTypes + static_cast<int>(t)]->get(device);
}

CUfunction where_kernel(D t, int device) {
    static const auto table = [] {
        std::array<std::unique_ptr<BuiltinKernel>, kNumDTypes> k;
        for (int d = 0; d < kNumDTypes; ++d)
            k[d] = std::make_unique<BuiltinKernel>(
                "elementwise", std::string("where_") + kernel_suffix(static_cast<D>(d)));
        return k;
    }();
    return table[static_cast<int>(t)]->get(device);
}

PyTypeObject* array_type() {
    static PyTypeObject* t = reinterpret_cast<PyTypeObject*>(py::type::of<Array>().ptr());
    return t;
}

// The Array inside a Python object whose exact type is array_type() (no type-caster lookup).
const Array& array_of(PyObject* p) {
    auto* inst = reinterpret_cast<py::detail::instance*>(p);
    return *static_cast<const Array*>(inst->get_value_and_holder().value_ptr());
}

std::string shape_text(const Dims& shape) {
    std::string s = "(";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

// One operand: an Array, a weak Python scalar (bool / int / float) or a strong NumPy scalar.
struct Operand {
    enum Kind { array, weak_bool, weak_int, weak_float, strong } kind;
    const Array* arr = nullptr;
    D dtype = D::b1;  // array and strong scalars
    py::handle value;
    py::object item;  // a strong scalar's Python value
    bool is_scalar() const { return kind != array; }
};

Operand parse(py::handle h, const char* what) {
    Operand o;
    PyObject* p = h.ptr();
    if (Py_TYPE(p) == array_type()) {
        o.kind = Operand::array;
        o.arr = &array_of(p);
        o.dtype = o.arr->dtype();
        return o;
    }
    o.value = h;
    if (PyBool_Check(p)) {
        o.kind = Operand::weak_bool;
    } else if (PyLong_CheckExact(p)) {
        o.kind = Operand::weak_int;
    } else if (PyFloat_CheckExact(p)) {
        o.kind = Operand::weak_float;
    } else if (py::hasattr(h, "dtype") && py::hasattr(h, "item") && py::len(h.attr("shape")) == 0) {
        o.kind = Operand::strong;
        const std::string name = py::str(h.attr("dtype").attr("name"));
        try {
            o.dtype = parse_dtype(name);
        } catch (const std::invalid_argument& e) {
            throw py::type_error(std::string(what) + ": " + e.what());
        }
        o.item = h.attr("item")();
        o.value = o.item;
    } else {
        throw py::type_error(std::string(what) + ": unsupported operand type " +
                             std::string(py::str(py::type::handle_of(h).attr("__name__"))) +
                             " (expected a GPUArray, a Python or NumPy scalar)");
    }
    return o;
}

// The computing dtype of a weak scalar next to dtype `t` (NEP 50).
D weak_result(Operand::Kind k, D t) {
    switch (k) {
        case Operand::weak_int:
            return t == D::b1 ? D::i64 : t;
        case Operand::weak_float:
            return is_floating(t) ? t : D::f64;
        default:
            return t;
    }
}

D default_dtype(Operand::Kind k) {
    return k == Operand::weak_float ? D::f64 : k == Operand::weak_int ? D::i64 : D::b1;
}

D common_dtype(const Operand& a, const Operand& b) {
    const bool wa = a.is_scalar() && a.kind != Operand::strong;
    const bool wb = b.is_scalar() && b.kind != Operand::strong;
    if (wa && wb) return promote(default_dtype(a.kind), default_dtype(b.kind));
    if (wa) return weak_result(a.kind, b.dtype);
    if (wb) return weak_result(b.kind, a.dtype);
    return promote(a.dtype, b.dtype);
}

// A Python int must fit an integer computing dtype (NumPy raises OverflowError otherwise).
void check_int_range(const Operand& o, D t) {
    if (o.kind != Operand::weak_int || is_floating(t) || t == D::b1) return;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o.value.ptr(), &overflow);
    long long lo = 0, hi = 0;
    switch (t) {
        case D::i8:
            lo = -128, hi = 127;
            break;
        case D::i16:
            lo = -32768, hi = 32767;
            break;
        case D::i32:
            lo = INT32_MIN, hi = INT32_MAX;
            break;
        case D::u8:
            lo = 0, hi = 255;
            break;
        default:
            lo = INT64_MIN, hi = INT64_MAX;
            break;
    }
    if (overflow != 0 || v < lo || v > hi) {
        throw py::value_error("Python integer " + std::string(py::str(o.value)) +
                              " out of bounds for " + dtype_name(t));
    }
}

bool broadcast_into(Dims& shape, const Dims& other) {
    if (other.size() > shape.size()) shape.insert(shape.begin(), other.size() - shape.size(), 1);
    const size_t off = shape.size() - other.size();
    for (size_t i = 0; i < other.size(); ++i) {
        int64_t& s = shape[off + i];
        if (s == other[i] || other[i] == 1) continue;
        if (s != 1) return false;
        s = other[i];
    }
    return true;
}

Dims broadcast_shapes(const Operand* const* ops, int n) {
    Dims shape;
    for (int i = 0; i < n; ++i) {
        if (ops[i]->kind != Operand::array) continue;
        if (!broadcast_into(shape, ops[i]->arr->shape())) {
            std::string msg = "operands could not be broadcast together with shapes";
            for (int j = 0; j < n; ++j)
                if (ops[j]->kind == Operand::array) msg += " " + shape_text(ops[j]->arr->shape());
            throw py::value_error(msg);
        }
    }
    return shape;
}

// The strides of `a` broadcast to `shape`, in elements (0 on broadcast axes).
void broadcast_strides(const Array& a, const Dims& shape, long long* out) {
    const size_t off = shape.size() - a.shape().size();
    const int item = a.itemsize();
    for (size_t d = 0; d < shape.size(); ++d) {
        out[d] = (d < off || a.shape()[d - off] == 1) ? 0 : a.strides()[d - off] / item;
    }
}

// A contiguous copy of `a` broadcast to `shape` (for strided problems past 32-bit indexing).
Array materialize(const Array& a, const Dims& shape, const StreamPtr& stream) {
    Dims strides(shape.size());
    std::vector<long long> el(shape.size());
    broadcast_strides(a, shape, el.data());
    for (size_t d = 0; d < shape.size(); ++d) strides[d] = el[d] * a.itemsize();
    return contiguous(a.view(shape, strides, a.offset()), stream);
}

// The launch geometry of `target` = f(inputs...) (nullptr inputs are scalars).
struct Geometry {
    EwLayout layout;
    unsigned long long n;
    int mode;
    LaunchConfig config;
};

constexpr long long kMaxStridedElements = (1LL << 31) - 1;

void geometry(Geometry& g, const Array& target, const Array* const* in, int nin, int vec_elems) {
    g.n = static_cast<unsigned long long>(target.size());
    bool contiguous_all = target.is_c_contiguous();
    for (int k = 0; k < nin && contiguous_all; ++k) {
        if (in[k] && (!in[k]->is_c_contiguous() || in[k]->shape() != target.shape()))
            contiguous_all = false;
    }
    if (contiguous_all) {
        g.mode |= kContiguous;
        g.layout.ndim = 0;
        g.config = launch_config_flat((g.n + vec_elems - 1) / vec_elems);
        return;
    }
    const Dims& shape = target.shape();
    const int nd = static_cast<int>(shape.size());
    long long st[4][64] = {};
    broadcast_strides(target, shape, st[0]);
    for (int k = 0; k < nin; ++k)
        if (in[k]) broadcast_strides(*in[k], shape, st[k + 1]);
    int n = 0;
    for (int d = 0; d < nd; ++d) {
        if (shape[d] == 1) continue;
        bool merge = n > 0;
        for (int k = 0; k <= nin && merge; ++k)
            merge = g.layout.strides[k][n - 1] == shape[d] * st[k][d];
        if (merge) {
            g.layout.shape[n - 1] *= shape[d];
            for (int k = 0; k <= nin; ++k) g.layout.strides[k][n - 1] = st[k][d];
            continue;
        }
        if (n == kMaxElementwiseDims) {
            throw py::value_error(
                "elementwise: the operands' layouts need more than 8 dimensions "
                "after merging; make them contiguous first");
        }
        g.layout.shape[n] = shape[d];
        for (int k = 0; k < 4; ++k) g.layout.strides[k][n] = k <= nin ? st[k][d] : 0;
        ++n;
    }
    g.layout.ndim = n;
    g.config = launch_config_1d(g.n, target.device());
}

std::string cast_error(const char* opname, D from, D to) {
    return std::string("Cannot cast ufunc '") + opname + "' output from " + dtype_name(from) +
           " to " + dtype_name(to) + " with casting rule 'same_kind'";
}

// Checks `out` and returns the shape the computation runs over.
const Array* check_out(py::handle out, const Dims& shape, D result, const char* opname,
                       int device) {
    if (out.is_none()) return nullptr;
    if (Py_TYPE(out.ptr()) != array_type()) throw py::type_error("out must be a GPUArray");
    const Array* o = &array_of(out.ptr());
    Dims joint = o->shape();
    if (!broadcast_into(joint, shape) || joint != o->shape()) {
        throw py::value_error("non-broadcastable output operand with shape " +
                              shape_text(o->shape()) + " doesn't match the broadcast shape " +
                              shape_text(shape));
    }
    if (kind(result) > kind(o->dtype()))
        throw py::type_error(cast_error(opname, result, o->dtype()));
    if (o->device() != device) throw py::value_error("out is on another device than the inputs");
    return o;
}

// Finishes an op: the result `r` goes into `out` (cast) when it was computed elsewhere.
py::object finish(py::handle out, const Array* o, Array r, const StreamPtr& stream) {
    if (o == nullptr) return py::cast(std::move(r));
    if (r.buffer() != o->buffer()) {
        Array src = r.dtype() == o->dtype() ? r : astype(r, o->dtype(), stream);
        copy_device(*o, src, stream);
    }
    return py::reinterpret_borrow<py::object>(out);
}

// Whether `out` can be written directly: an input viewing its buffer in another layout (a[1:] +=
// a[:-1], a += a[0]) would be read after being overwritten, so such results go through a
// temporary, as NumPy's overlap handling does.
bool writable_in_place(const Array* o, const Array* const* in, int nin) {
    for (int k = 0; k < nin; ++k) {
        if (in[k] && in[k]->buffer() == o->buffer() &&
            !(in[k]->offset() == o->offset() && in[k]->shape() == o->shape() &&
              in[k]->strides() == o->strides())) {
            return false;
        }
    }
    return true;
}

struct Resolved {
    int op;
    D compute;
    D result;
    bool swap;
};

Resolved resolve_binary(int op, D c0) {
    Resolved r{op, c0, c0, false};
    const char* name = kBinaryOpNames[op];
    switch (static_cast<BinaryOp>(op)) {
        case BinaryOp::subtract:
            if (c0 == D::b1) {
                throw py::type_error(
                    "numpy boolean subtract, the `-` operator, is not supported, use the "
                    "bitwise_xor, the `^` operator, or the logical_xor function instead.");
            }
            break;
        case BinaryOp::divide:
            if (!is_floating(c0)) r.compute = r.result = D::f64;
            break;
        case BinaryOp::floor_divide:
        case BinaryOp::mod:
        case BinaryOp::power:
            if (c0 == D::b1) r.compute = r.result = D::i8;
            break;
        case BinaryOp::maximum:
            if (c0 == D::b1) r.op = static_cast<int>(BinaryOp::add);  // logical or
            break;
        case BinaryOp::minimum:
            if (c0 == D::b1) r.op = static_cast<int>(BinaryOp::multiply);  // logical and
            break;
        case BinaryOp::greater:
            r.op = static_cast<int>(BinaryOp::less), r.swap = true, r.result = D::b1;
            break;
        case BinaryOp::greater_equal:
            r.op = static_cast<int>(BinaryOp::less_equal), r.swap = true, r.result = D::b1;
            break;
        case BinaryOp::equal:
        case BinaryOp::not_equal:
        case BinaryOp::less:
        case BinaryOp::less_equal:
            r.result = D::b1;
            break;
        case BinaryOp::logical_and:
        case BinaryOp::logical_or:
        case BinaryOp::logical_xor:
            r.compute = r.result = D::b1;
            break;
        case BinaryOp::bitwise_and:
        case BinaryOp::bitwise_or:
        case BinaryOp::bitwise_xor:
        case BinaryOp::left_shift:
        case BinaryOp::right_shift:
            if (is_floating(c0)) {
                throw py::type_error(std::string("ufunc '") + name +
                                     "' not supported for the input types (" + dtype_name(c0) +
                                     "); it needs integers or booleans");
            }
            if (c0 == D::b1 && op >= static_cast<int>(BinaryOp::left_shift))
                r.compute = r.result = D::i8;
            break;
        default:
            break;
    }
    return r;
}

// The operand as an array of dtype t (a cast copy when needed), kept alive by `holder`.
const Array* as_dtype(const Operand& o, D t, std::optional<Array>& holder,
                      const StreamPtr& stream) {
    if (o.kind != Operand::array) return nullptr;
    if (o.arr->dtype() == t) return o.arr;
    holder.emplace(astype(*o.arr, t, stream));
    return &*holder;
}

int device_of(const Operand* const* ops, int n) {
    int device = -1;
    for (int i = 0; i < n; ++i) {
        if (ops[i]->kind != Operand::array) continue;
        if (device < 0) {
            device = ops[i]->arr->device();
        } else if (ops[i]->arr->device() != device) {
            throw py::value_error("elementwise: operands are on different devices (" +
                                  std::to_string(device) + " and " +
                                  std::to_string(ops[i]->arr->device()) + ")");
        }
    }
    if (device < 0) throw py::type_error("elementwise: at least one operand must be a GPUArray");
    return device;
}

uint64_t scalar_arg(const Operand& o, D t) {
    return o.kind == Operand::array ? 0 : scalar_bits(o.value, t, "elementwise scalar");
}

}  // namespace

py::object binary(int op, py::handle a_h, py::handle b_h, py::handle out) {
    if (op < 0 || op >= kNumBinary) throw py::value_error("binary: unknown op code");
    Operand a = parse(a_h, kBinaryOpNames[op]), b = parse(b_h, kBinaryOpNames[op]);
    const Operand* ops[2] = {&a, &b};
    const int device = device_of(ops, 2);
    const D c0 = common_dtype(a, b);
    check_int_range(a, c0);
    check_int_range(b, c0);
    Resolved r = resolve_binary(op, c0);
    const Operand* x = &a;
    const Operand* y = &b;
    if (r.swap) std::swap(x, y);
    // Same shapes (the common case) need no broadcasting work.
    const Dims shape =
        (a.kind == Operand::array && b.kind == Operand::array && a.arr->shape() == b.arr->shape())
            ? a.arr->shape()
            : broadcast_shapes(ops, 2);
    const Array* o = check_out(out, shape, r.result, kBinaryOpNames[op], device);
    const uint64_t x_bits = scalar_arg(*x, r.compute), y_bits = scalar_arg(*y, r.compute);
    StreamPtr stream = current_stream(device);
    std::optional<Array> hx, hy;
    const Array* in[2] = {as_dtype(*x, r.compute, hx, stream), as_dtype(*y, r.compute, hy, stream)};
    const Dims& run_shape = o ? o->shape() : shape;
    Array target = (o && o->dtype() == r.result && writable_in_place(o, in, 2))
                       ? *o
                       : Array::empty(run_shape, r.result, stream);
    if (target.size() > 0) {
        if (target.size() > kMaxStridedElements) {
            for (int k = 0; k < 2; ++k) {
                if (in[k] && (!in[k]->is_c_contiguous() || in[k]->shape() != run_shape)) {
                    (k == 0 ? hx : hy).emplace(materialize(*in[k], run_shape, stream));
                    in[k] = &*(k == 0 ? hx : hy);
                }
            }
            if (!target.is_c_contiguous()) target = Array::empty(run_shape, r.result, stream);
        }
        Geometry g;
        g.mode = (in[0] ? 0 : kScalarA) | (in[1] ? 0 : kScalarB);
        geometry(g, target, in, 2, 16 / itemsize(r.compute));
        CUfunction f = binary_kernel(r.op, r.compute, device);
        make_resident(stream, {&target, in[0] ? in[0] : &target, in[1] ? in[1] : &target});
        uint64_t po = target.data_ptr(), pa = in[0] ? in[0]->data_ptr() : 0,
                 pb = in[1] ? in[1]->data_ptr() : 0;
        uint64_t ba = x_bits, bb = y_bits;
        void* args[] = {&po, &pa, &pb, &ba, &bb, &g.layout, &g.n, &g.mode};
        launch_kernel(f, g.config, *stream, args);
        for (int k = 0; k < 2; ++k)
            if (in[k]) in[k]->buffer()->used_on(stream);
    }
    return finish(out, o, std::move(target), stream);
}

py::object unary(int op, py::handle a_h, py::handle out) {
    if (op < 0 || op >= kNumUnary) throw py::value_error("unary: unknown op code");
    const char* name = kUnaryOpNames[op];
    const UnaryOp u = static_cast<UnaryOp>(op);
    if (u == UnaryOp::logical_not) {
        return binary(static_cast<int>(BinaryOp::equal), a_h, py::bool_(false), out);
    }
    Operand a = parse(a_h, name);
    if (a.kind != Operand::array) throw py::type_error(std::string(name) + ": expected a GPUArray");
    const D t = a.dtype;
    const int device = a.arr->device();
    // kernel: run un_<op>_<compute>; identity: a copy; constant: a filled array.
    enum { kernel, identity, constant } how = kernel;
    D compute = t, result = t;
    bool constant_value = false;
    auto refuse = [&](const char* why) {
        throw py::type_error(std::string("ufunc '") + name + "' not supported for " +
                             dtype_name(t) + (why ? why : ""));
    };
    switch (u) {
        case UnaryOp::negative:
        case UnaryOp::sign:
            if (t == D::b1) refuse(" (use ~ or logical_not)");
            break;
        case UnaryOp::positive:
            if (t == D::b1) refuse(nullptr);
            how = identity;
            break;
        case UnaryOp::abs:
            if (t == D::b1 || t == D::u8) how = identity;
            break;
        case UnaryOp::relu:
            if (t == D::b1) how = identity;
            break;
        case UnaryOp::square:
            if (t == D::b1) compute = result = D::i8;
            break;
        case UnaryOp::round:
            if (t == D::b1) {  // NumPy rounds bools in float16
                compute = result = D::f16;
                break;
            }
            if (!is_floating(t)) how = identity;
            break;
        case UnaryOp::floor:
        case UnaryOp::ceil:
        case UnaryOp::trunc:
            if (!is_floating(t)) how = identity;
            break;
        case UnaryOp::isnan:
        case UnaryOp::isinf:
        case UnaryOp::isfinite:
            result = D::b1;
            if (!is_floating(t)) {
                how = constant;
                constant_value = u == UnaryOp::isfinite;
            }
            break;
        case UnaryOp::invert:
            if (is_floating(t)) refuse(" (integers and booleans only)");
            break;
        default:  // math functions: integers promote to a float type as NumPy's do
            compute = result = float_of(t);
            break;
    }
    const Array* o = check_out(out, a.arr->shape(), result, name, device);
    StreamPtr stream = current_stream(device);
    const Dims& run_shape = o ? o->shape() : a.arr->shape();
    if (how == identity) {
        Array r = astype(*a.arr, result, stream);
        if (o == nullptr) return py::cast(std::move(r));
        return finish(out, o, materialize(r, run_shape, stream), stream);
    }
    std::optional<Array> h;
    const Array* in[1] = {as_dtype(a, compute, h, stream)};  // no copy on the constant path
    Array target = (o && o->dtype() == result && writable_in_place(o, in, 1))
                       ? *o
                       : Array::empty(run_shape, result, stream);
    if (how == constant) {
        fill(target, py::bool_(constant_value), stream);
        return finish(out, o, std::move(target), stream);
    }
    if (target.size() > 0) {
        if (target.size() > kMaxStridedElements &&
            (!in[0]->is_c_contiguous() || in[0]->shape() != run_shape ||
             !target.is_c_contiguous())) {
            h.emplace(materialize(*in[0], run_shape, stream));
            in[0] = &*h;
            if (!target.is_c_contiguous()) target = Array::empty(run_shape, result, stream);
        }
        Geometry g;
        g.mode = 0;
        geometry(g, target, in, 1, 16 / itemsize(compute));
        CUfunction f = unary_kernel(op, compute, device);
        make_resident(stream, {&target, in[0]});
        uint64_t po = target.data_ptr(), pa = in[0]->data_ptr();
        void* args[] = {&po, &pa, &g.layout, &g.n, &g.mode};
        launch_kernel(f, g.config, *stream, args);
        in[0]->buffer()->used_on(stream);
    }
    return finish(out, o, std::move(target), stream);
}

py::object where(py::handle cond_h, py::handle x_h, py::handle y_h, py::handle out) {
    Operand c = parse(cond_h, "where"), x = parse(x_h, "where"), y = parse(y_h, "where");
    if (c.kind != Operand::array) throw py::type_error("where: the condition must be a GPUArray");
    const Operand* ops[3] = {&c, &x, &y};
    const int device = device_of(ops, 3);
    const D t = common_dtype(x, y);
    check_int_range(x, t);
    check_int_range(y, t);
    const Dims shape = broadcast_shapes(ops, 3);
    const Array* o = check_out(out, shape, t, "where", device);
    const uint64_t x_bits = scalar_arg(x, t), y_bits = scalar_arg(y, t);
    StreamPtr stream = current_stream(device);
    std::optional<Array> hc, hx, hy;
    const Array* in[3] = {as_dtype(c, D::b1, hc, stream), as_dtype(x, t, hx, stream),
                          as_dtype(y, t, hy, stream)};
    const Dims& run_shape = o ? o->shape() : shape;
    Array target = (o && o->dtype() == t && writable_in_place(o, in, 3))
                       ? *o
                       : Array::empty(run_shape, t, stream);
    if (target.size() > 0) {
        if (target.size() > kMaxStridedElements) {
            std::optional<Array>* holders[3] = {&hc, &hx, &hy};
            for (int k = 0; k < 3; ++k) {
                if (in[k] && (!in[k]->is_c_contiguous() || in[k]->shape() != run_shape)) {
                    holders[k]->emplace(materialize(*in[k], run_shape, stream));
                    in[k] = &**holders[k];
                }
            }
            if (!target.is_c_contiguous()) target = Array::empty(run_shape, t, stream);
        }
        Geometry g;
        g.mode = (in[1] ? 0 : kScalarA) | (in[2] ? 0 : kScalarB);
        geometry(g, target, in, 3, 1);
        CUfunction f = where_kernel(t, device);
        make_resident(stream, {&target, in[0], in[1] ? in[1] : &target, in[2] ? in[2] : &target});
        uint64_t po = target.data_ptr(), pc = in[0]->data_ptr(), px = in[1] ? in[1]->data_ptr() : 0,
                 py_ = in[2] ? in[2]->data_ptr() : 0;
        uint64_t bx = x_bits, by = y_bits;
        void* args[] = {&po, &pc, &px, &py_, &bx, &by, &g.layout, &g.n, &g.mode};
        launch_kernel(f, g.config, *stream, args);
        for (int k = 0; k < 3; ++k)
            if (in[k]) in[k]->buffer()->used_on(stream);
    }
    return finish(out, o, std::move(target), stream);
}

}  // namespace pgk
