// NVRTC, modules, kernels.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/bindings.hpp"
#include "core/device.hpp"
#include "jit/kernel_args.hpp"
#include "jit/module.hpp"
#include "jit/nvrtc.hpp"
#include "jit/tensor_map.hpp"

namespace py = pybind11;

namespace pgk {

namespace {

bool names_target(const std::vector<std::string>& options) {
    for (const std::string& o : options) {
        if (o.rfind("--gpu-architecture", 0) == 0 || o.rfind("-arch", 0) == 0) return true;
    }
    return false;
}

}  // namespace

void bind_jit(py::module_& m) {
    m.def(
        "load_nvrtc",
        [](const std::vector<std::string>& candidates) {
            NvrtcLoadResult r = load_nvrtc(candidates);
            py::dict d = load_result_dict(r);
            d["version"] = py::make_tuple(r.major, r.minor);
            return d;
        },
        py::arg("candidates"), "dlopen the first NVRTC candidate that loads; never raises.");
    m.def("nvrtc_version", &nvrtc_version);
    m.def("nvrtc_loaded", &nvrtc_loaded);
    m.def(
        "compile",
        [](const std::string& source, const std::string& name, std::vector<std::string> options,
           const std::vector<std::string>& name_expressions) {
            if (!names_target(options)) {
                options.push_back("--gpu-architecture=" + target_arch(get_device()));
            }
            CompileResult r;
            {
                py::gil_scoped_release nogil;
                r = nvrtc_compile(source, name, options, name_expressions);
            }
            py::dict lowered;
            for (const auto& [expr, mangled] : r.lowered) lowered[py::str(expr)] = mangled;
            return py::make_tuple(py::bytes(r.cubin), r.log, lowered);
        },
        py::arg("source"), py::arg("name"), py::arg("options") = std::vector<std::string>{},
        py::arg("name_expressions") = std::vector<std::string>{},
        "Compile to a cubin for the current device's exact architecture unless the options name "
        "one. Returns (cubin, log, {name expression: lowered name}); CompileError on failure.");

    py::class_<Module, std::shared_ptr<Module>>(m, "Module")
        .def(py::init([](py::bytes cubin, int device) {
                 return std::make_shared<Module>(std::string(cubin), device);
             }),
             py::arg("cubin"), py::arg("device"))
        .def_property_readonly("device", &Module::device)
        .def(
            "function",
            [](std::shared_ptr<Module> module, const std::string& name) {
                return Function(module, name);
            },
            py::arg("name"));

    py::class_<Function>(m, "Function")
        .def_property_readonly("name", &Function::name)
        .def_property_readonly("device", &Function::device)
        .def("attributes",
             [](const Function& f) {
                 FunctionAttributes a = f.attributes();
                 py::dict d;
                 d["num_regs"] = a.num_regs;
                 d["max_threads_per_block"] = a.max_threads_per_block;
                 d["shared_size_bytes"] = a.shared_size_bytes;
                 d["const_size_bytes"] = a.const_size_bytes;
                 d["local_size_bytes"] = a.local_size_bytes;
                 d["max_dynamic_shared_size_bytes"] = a.max_dynamic_shared_size_bytes;
                 d["ptx_version"] = a.ptx_version;
                 d["binary_version"] = a.binary_version;
                 return d;
             })
        .def("set_max_dynamic_shared_memory", &Function::set_max_dynamic_shared_memory,
             py::arg("bytes"))
        .def(
            "set_signature",
            [](Function& f, const std::vector<std::string>& codes) {
                std::vector<ArgCode> parsed;
                parsed.reserve(codes.size());
                for (const std::string& c : codes) parsed.push_back(parse_arg_code(c));
                f.set_signature(std::move(parsed));
            },
            py::arg("codes"))
        .def(
            "launch",
            [](const Function& f, py::handle grid, py::handle block, unsigned shared_mem,
               StreamPtr stream, py::tuple args, bool dependent) {
                LaunchConfig config;
                config.dependent = dependent;
                parse_dim3(grid, config.grid, "grid");
                parse_dim3(block, config.block, "block");
                config.shared_mem = shared_mem;
                launch_function(f, config, stream ? stream : current_stream(f.device()), args);
            },
            py::arg("grid"), py::arg("block"), py::arg("shared_mem"), py::arg("stream"),
            py::arg("args"), py::arg("dependent") = false);

    py::class_<TensorMap>(m, "TensorMap")
        .def(py::init<const Array&, const Dims&, int>(), py::arg("array"), py::arg("box"),
             py::arg("swizzle"),
             "Encode a TMA descriptor of `array` (cuTensorMapEncodeTiled); box outermost first.")
        .def_property_readonly("device", &TensorMap::device)
        .def_property_readonly("box", &TensorMap::box)
        .def("to_bytes", [](const TensorMap& t) {
            return py::bytes(reinterpret_cast<const char*>(&t.map()), sizeof(CUtensorMap));
        });
}

}  // namespace pgk
