#include "jit/module.hpp"

#include <stdexcept>

#include "core/device.hpp"
#include "core/driver.hpp"
#include "core/graph.hpp"

namespace pgk {

Module::Module(const std::string& image, int device) : device_(device) {
    bind_device(device);
    check(drv().cuModuleLoadData(&module_, image.data()), "cuModuleLoadData");
}

Module::~Module() {
    if (module_ == nullptr) return;
    // cuModuleUnload during a capture would invalidate it (the garbage collector may drop a
    // module in the middle of one).
    release_outside_capture([module = module_] {
        if (driver_loaded()) drv().cuModuleUnload(module);
    });
}

CUfunction Module::function(const std::string& name) const {
    CUfunction f = nullptr;
    CUresult r = drv().cuModuleGetFunction(&f, module_, name.c_str());
    if (r != CUDA_SUCCESS) throw_cuda_error(r, ("cuModuleGetFunction(" + name + ")").c_str());
    return f;
}

const char* const kArgCodeNames[15] = {"ptr", "i8",  "u8",   "i16", "u16", "i32",  "u32", "i64",
                                       "u64", "f16", "bf16", "f32", "f64", "bool", "tmap"};

ArgCode parse_arg_code(const std::string& code) {
    for (size_t i = 0; i < sizeof(kArgCodeNames) / sizeof(kArgCodeNames[0]); ++i) {
        if (code == kArgCodeNames[i]) return static_cast<ArgCode>(i);
    }
    throw std::invalid_argument("unknown kernel parameter type code '" + code +
                                "' (ptr i8 u8 i16 u16 i32 u32 i64 u64 f16 bf16 f32 f64 bool tmap)");
}

int arg_code_size(ArgCode code) {
    switch (code) {
        case ArgCode::i8:
        case ArgCode::u8:
        case ArgCode::b1:
            return 1;
        case ArgCode::i16:
        case ArgCode::u16:
        case ArgCode::f16:
        case ArgCode::bf16:
            return 2;
        case ArgCode::i32:
        case ArgCode::u32:
        case ArgCode::f32:
            return 4;
        case ArgCode::tmap:
            return static_cast<int>(sizeof(CUtensorMap));
        default:
            return 8;
    }
}

Function::Function(std::shared_ptr<Module> module, const std::string& name)
    : module_(std::move(module)), function_(module_->function(name)), name_(name) {}

FunctionAttributes Function::attributes() const {
    auto get = [&](CUfunction_attribute attr) {
        int value = 0;
        check(drv().cuFuncGetAttribute(&value, attr, function_), "cuFuncGetAttribute");
        return value;
    };
    return FunctionAttributes{get(CU_FUNC_ATTRIBUTE_NUM_REGS),
                              get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
                              get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
                              get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES),
                              get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
                              get(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
                              get(CU_FUNC_ATTRIBUTE_PTX_VERSION),
                              get(CU_FUNC_ATTRIBUTE_BINARY_VERSION)};
}

void Function::set_max_dynamic_shared_memory(int bytes) {
    check(
        drv().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
        "cuFuncSetAttribute");
}

}  // namespace pgk
