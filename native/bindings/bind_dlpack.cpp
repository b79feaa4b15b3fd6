// DLPack (legacy "dltensor" capsules, which PyTorch, CuPy and JAX all produce and consume):
// zero-copy export of an Array and import of a CUDA tensor as an Array.
#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "bindings/bindings.hpp"
#include "core/array.hpp"
#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/event.hpp"
#include "core/residency.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

// The DLPack ABI (dlpack.h v0.8+), declared here to avoid a dependency.
struct DLDevice {
    int32_t device_type;  // 2 = kDLCUDA
    int32_t device_id;
};
struct DLDataType {
    uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
    uint8_t bits;
    uint16_t lanes;
};
struct DLTensor {
    void* data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t* shape;
    int64_t* strides;  // in elements; NULL = C-contiguous
    uint64_t byte_offset;
};
struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLCUDA = 2;

DLDataType to_dl(DType t) {
    switch (t) {
        case DType::f64:
            return {2, 64, 1};
        case DType::f32:
            return {2, 32, 1};
        case DType::f16:
            return {2, 16, 1};
        case DType::bf16:
            return {4, 16, 1};
        case DType::i8:
            return {0, 8, 1};
        case DType::i16:
            return {0, 16, 1};
        case DType::i32:
            return {0, 32, 1};
        case DType::i64:
            return {0, 64, 1};
        case DType::u8:
            return {1, 8, 1};
        case DType::b1:
            return {6, 8, 1};
    }
    return {0, 0, 0};
}

DType from_dl(DLDataType t) {
    if (t.lanes == 1) {
        for (int i = 0; i < kNumDTypes; ++i) {
            DLDataType d = to_dl(static_cast<DType>(i));
            if (d.code == t.code && d.bits == t.bits) return static_cast<DType>(i);
        }
    }
    throw py::type_error("from_dlpack: unsupported DLPack dtype (code " + std::to_string(t.code) +
                         ", bits " + std::to_string(t.bits) + ", lanes " + std::to_string(t.lanes) +
                         ")");
}

// What an exported capsule owns: the Array (keeping its buffer alive) and the shape/strides.
struct Export {
    DLManagedTensor managed;
    Array array;
    Dims shape;
    Dims strides;  // elements
    explicit Export(const Array& a) : array(a) {}
};

void delete_export(DLManagedTensor* self) {
    Export* e = static_cast<Export*>(self->manager_ctx);
    PyGILState_STATE gil = PyGILState_Ensure();  // the buffer may release a Python owner
    delete e;
    PyGILState_Release(gil);
}

// DLPack's stream argument -> a CUstream; -1 (no sync requested) -> nullopt via `skip`.
CUstream consumer_stream(py::object stream, bool* skip) {
    *skip = false;
    if (stream.is_none()) return CU_STREAM_LEGACY;
    const long long s = stream.cast<long long>();
    if (s == -1) {
        *skip = true;
        return nullptr;
    }
    if (s == 0 || s == 1) return CU_STREAM_LEGACY;
    if (s == 2) return CU_STREAM_PER_THREAD;
    return reinterpret_cast<CUstream>(static_cast<uintptr_t>(s));
}

}  // namespace

void bind_dlpack(py::module_& m) {
    m.def(
        "to_dlpack",
        [](const Array& a, py::object stream) {
            bool skip = false;
            CUstream consumer = consumer_stream(stream, &skip);
            // A spilled evictable array comes back first (on its last stream, which the consumer
            // then waits for). The address handed out stays valid until the pool next needs room.
            if (a.buffer()->evictable()) make_resident(a.buffer()->last_stream(), {&a});
            const StreamPtr& producer = a.buffer()->last_stream();
            if (!skip && producer && producer->handle() != consumer) {
                // The consumer's stream waits for the work already enqueued on the array.
                Event ready(a.device(), false);
                ready.record(*producer);
                check(drv().cuStreamWaitEvent(consumer, ready.handle(), 0), "cuStreamWaitEvent");
            }
            auto e = std::make_unique<Export>(a);
            e->shape = a.shape();
            e->strides = a.strides();
            for (int64_t& s : e->strides) s /= a.itemsize();
            DLTensor& t = e->managed.dl_tensor;
            t.data = reinterpret_cast<void*>(a.data_ptr());
            t.device = {kDLCUDA, a.device()};
            t.ndim = a.ndim();
            t.dtype = to_dl(a.dtype());
            t.shape = e->shape.data();
            t.strides = e->strides.data();
            t.byte_offset = 0;
            e->managed.manager_ctx = e.get();
            e->managed.deleter = delete_export;
            DLManagedTensor* managed = &e.release()->managed;
            PyObject* capsule = PyCapsule_New(managed, "dltensor", [](PyObject* cap) {
                // Only an unconsumed capsule still owns the tensor.
                if (PyCapsule_IsValid(cap, "dltensor")) {
                    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
                    t->deleter(t);
                }
            });
            if (capsule == nullptr) {
                managed->deleter(managed);
                throw py::error_already_set();
            }
            return py::reinterpret_steal<py::object>(capsule);
        },
        py::arg("array"), py::arg("stream") = py::none(),
        "A 'dltensor' capsule viewing the array (zero-copy). `stream` is the consumer's stream "
        "per the DLPack protocol (None/1 legacy default, 2 per-thread, -1 no synchronization).");

    m.def(
        "from_dlpack",
        [](py::capsule capsule) {
            if (std::string(capsule.name() ? capsule.name() : "") != "dltensor") {
                throw py::type_error("from_dlpack: expected an unconsumed 'dltensor' capsule");
            }
            auto* managed = static_cast<DLManagedTensor*>(capsule.get_pointer());
            const DLTensor& t = managed->dl_tensor;
            if (t.device.device_type != kDLCUDA) {
                throw py::type_error(
                    "from_dlpack: the tensor is not in CUDA device memory "
                    "(DLPack device type " +
                    std::to_string(t.device.device_type) + ")");
            }
            const DType dtype = from_dl(t.dtype);
            const int item = itemsize(dtype);
            Dims shape(t.shape, t.shape + t.ndim);
            Dims strides = t.strides ? Dims(t.strides, t.strides + t.ndim)
                                     : Array::contiguous_strides(shape, 1);
            for (int64_t& s : strides) s *= item;
            // Byte range the view touches, so the external buffer can bound later views.
            int64_t low = 0, high = 0;
            bool empty = false;
            for (int d = 0; d < t.ndim; ++d) {
                if (shape[d] == 0) empty = true;
                const int64_t extent = (shape[d] - 1) * strides[d];
                (extent < 0 ? low : high) += extent;
            }
            const uint64_t base = reinterpret_cast<uint64_t>(t.data) + t.byte_offset;
            const uint64_t nbytes = empty ? 0 : static_cast<uint64_t>(high - low + item);
            // The capsule is ours now: rename it so its producer's destructor leaves it alone,
            // and own the tensor through a capsule that calls its deleter.
            PyCapsule_SetName(capsule.ptr(), "used_dltensor");
            py::capsule owner(managed, [](void* p) {
                auto* mt = static_cast<DLManagedTensor*>(p);
                if (mt->deleter) mt->deleter(mt);
            });
            const int device = t.device.device_id;
            BufferPtr buffer =
                Buffer::external(device, base + low, nbytes, owner.ptr(), current_stream(device));
            return Array(buffer, shape, strides, -low, dtype);
        },
        py::arg("capsule"), "An Array sharing memory with a consumed 'dltensor' capsule.");
}

}  // namespace pgk
