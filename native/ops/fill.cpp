#include "ops/fill.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/launch.hpp"
#include "core/residency.hpp"
#include "jit/builtin.hpp"
#include "ops/scalar.hpp"
#include "ops/strided.hpp"

namespace pgk {

namespace {

struct Vec16 {
    uint32_t x, y, z, w;  // matches uint4
};

// fill_u<8*size> over n elements at ptr.
void fill_elements(uint64_t ptr, uint64_t bits, int size, unsigned long long n,
                   const Stream& stream) {
    static const BuiltinKernel k1("fill", "fill_u8"), k2("fill", "fill_u16"),
        k4("fill", "fill_u32"), k8("fill", "fill_u64");
    const BuiltinKernel& k = size == 1 ? k1 : size == 2 ? k2 : size == 4 ? k4 : k8;
    uint8_t v1 = static_cast<uint8_t>(bits);
    uint16_t v2 = static_cast<uint16_t>(bits);
    uint32_t v4 = static_cast<uint32_t>(bits);
    uint64_t v8 = bits;
    void* value = size == 1   ? static_cast<void*>(&v1)
                  : size == 2 ? static_cast<void*>(&v2)
                  : size == 4 ? static_cast<void*>(&v4)
                              : static_cast<void*>(&v8);
    void* args[] = {&ptr, value, &n};
    launch_kernel(k.get(stream.device()), launch_config_1d(n, stream.device()), stream, args);
}

// Contiguous: 16-byte stores over the aligned bulk, element stores for the tail.
void fill_contiguous(uint64_t ptr, uint64_t bits, int size, unsigned long long n,
                     const Stream& stream) {
    static const BuiltinKernel k16("fill", "fill_x16");
    const unsigned long long nbytes = n * size;
    unsigned long long n16 = (ptr % 16 == 0) ? nbytes / 16 : 0;
    if (n16 > 0) {
        Vec16 pattern;
        unsigned char* p = reinterpret_cast<unsigned char*>(&pattern);
        for (int i = 0; i < 16; i += size) std::memcpy(p + i, &bits, size);
        void* args[] = {&ptr, &pattern, &n16};
        launch_kernel(k16.get(stream.device()), launch_config_1d(n16, stream.device()), stream,
                      args);
    }
    const unsigned long long done = n16 * 16 / size;
    if (done < n) fill_elements(ptr + done * size, bits, size, n - done, stream);
}

}  // namespace

void fill(const Array& a, pybind11::handle value, const StreamPtr& stream) {
    const uint64_t bits = scalar_bits(value, a.dtype(), "fill");
    if (stream->device() != a.device()) {
        throw std::invalid_argument("fill: the array is on device " + std::to_string(a.device()) +
                                    ", the stream on device " + std::to_string(stream->device()));
    }
    if (a.size() == 0) return;
    const int size = a.itemsize();
    if (a.is_c_contiguous()) {
        make_resident(stream, {&a});
        fill_contiguous(a.data_ptr(), bits, size, static_cast<unsigned long long>(a.size()),
                        *stream);
    } else {
        // One element holding the value, broadcast through the strided copy (zero source strides).
        Array scalar = Array::empty({1}, a.dtype(), stream);
        make_resident(stream, {&a});
        fill_elements(scalar.data_ptr(), bits, size, 1, *stream);
        strided_copy(a.data_ptr(), a.strides(), scalar.data_ptr(), Dims(a.ndim(), 0), a.shape(),
                     size, *stream);
    }
    a.buffer()->used_on(stream);
}

}  // namespace pgk
