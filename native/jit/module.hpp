// A loaded cubin (CUmodule) on one device, and the kernels in it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pgk {

class Module {
  public:
    Module(const std::string& image, int device);
    ~Module();
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    CUfunction function(const std::string& name) const;  // throws CudaError when missing
    int device() const { return device_; }

  private:
    CUmodule module_ = nullptr;
    int device_;
};

// Kernel parameter type codes of Function.set_signature (docs/internals.md).
// tmap: a CUtensorMap passed by value (jit/tensor_map.hpp), 128 bytes.
enum class ArgCode : uint8_t {
    ptr,
    i8,
    u8,
    i16,
    u16,
    i32,
    u32,
    i64,
    u64,
    f16,
    bf16,
    f32,
    f64,
    b1,
    tmap
};
// The code names, in ArgCode order ("ptr", ..., "bool", "tmap").
extern const char* const kArgCodeNames[15];
ArgCode parse_arg_code(const std::string& code);  // throws std::invalid_argument
int arg_code_size(ArgCode code);

struct FunctionAttributes {
    int num_regs, max_threads_per_block, shared_size_bytes, const_size_bytes, local_size_bytes,
        max_dynamic_shared_size_bytes, ptx_version, binary_version;
};

// One kernel; keeps its module loaded.
class Function {
  public:
    Function(std::shared_ptr<Module> module, const std::string& name);
    CUfunction handle() const { return function_; }
    int device() const { return module_->device(); }
    const std::string& name() const { return name_; }
    FunctionAttributes attributes() const;
    void set_max_dynamic_shared_memory(int bytes);

    void set_signature(std::vector<ArgCode> codes) { signature_ = std::move(codes); }
    const std::vector<ArgCode>& signature() const { return signature_; }

  private:
    std::shared_ptr<Module> module_;
    CUfunction function_;
    std::string name_;
    std::vector<ArgCode> signature_;
};

}  // namespace pgk
