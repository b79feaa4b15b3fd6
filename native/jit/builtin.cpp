#include "jit/builtin.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "jit/module.hpp"
#include "jit/nvrtc.hpp"

namespace pgk {

namespace fs = std::filesystem;

namespace {

std::mutex g_mutex;
std::string g_kernel_dir;
std::vector<std::string> g_options;
std::vector<std::string> g_include_dirs;
std::vector<std::string> g_nvrtc_candidates;
std::map<std::pair<int, std::string>, std::shared_ptr<Module>> g_modules;  // (device, file)

struct Arch {
    int major = 0, minor = 0;
    bool specific = false;  // the 'a' suffix
};

bool parse_arch(const std::string& folder, Arch* out) {
    // "sm_90a" -> 9.0 'a'; "sm_120a" -> 12.0 'a'; "sm_86" -> 8.6
    if (folder.rfind("sm_", 0) != 0) return false;
    std::string digits = folder.substr(3);
    out->specific = !digits.empty() && digits.back() == 'a';
    if (out->specific) digits.pop_back();
    if (digits.size() < 2 || digits.find_first_not_of("0123456789") != std::string::npos) {
        return false;
    }
    out->major = std::stoi(digits.substr(0, digits.size() - 1));
    out->minor = digits.back() - '0';
    return true;
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream data;
    data << in.rdbuf();
    return data.str();
}

std::shared_ptr<Module> load_module(int device, const std::string& file) {
    if (g_kernel_dir.empty()) {
        throw std::runtime_error("built-in kernels: set_kernel_dir was not called");
    }
    auto [major, minor] = compute_capability(device);
    std::vector<std::string> available;
    for (const auto& entry : fs::directory_iterator(g_kernel_dir)) {
        const std::string folder = entry.path().filename().string();
        if (fs::exists(entry.path() / (file + ".cubin"))) available.push_back(folder);
    }
    const std::string arch = choose_cubin_arch(major, minor, available);
    if (!arch.empty()) {
        return std::make_shared<Module>(
            read_file(fs::path(g_kernel_dir) / arch / (file + ".cubin")), device);
    }
    const std::string sm = "sm_" + std::to_string(major) + std::to_string(minor);
    if (!nvrtc_loaded() && !g_nvrtc_candidates.empty()) load_nvrtc(g_nvrtc_candidates);
    if (!nvrtc_loaded()) {
        throw std::runtime_error("no built-in '" + file + "' kernels for " + sm +
                                 " in this wheel, and NVRTC is not available to compile them: "
                                 "pip install \"pygpukit-runtime[jit]\"");
    }
    const fs::path source = fs::path(g_kernel_dir) / "src" / (file + ".cu");
    std::vector<std::string> options = g_options;
    options.push_back("--gpu-architecture=" + target_arch(device));
    for (const std::string& inc : g_include_dirs) options.push_back("-I" + inc);
    options.push_back("-I" + source.parent_path().string());
    CompileResult compiled = nvrtc_compile(read_file(source), file + ".cu", options, {});
    return std::make_shared<Module>(compiled.cubin, device);
}

}  // namespace

std::string choose_cubin_arch(int major, int minor, const std::vector<std::string>& available) {
    std::string exact_specific, exact, best_lower;
    int best_minor = -1;
    for (const std::string& folder : available) {
        Arch a;
        if (!parse_arch(folder, &a) || a.major != major) continue;
        if (a.minor == minor) {
            (a.specific ? exact_specific : exact) = folder;
        } else if (!a.specific && a.minor < minor && a.minor > best_minor) {
            best_minor = a.minor;
            best_lower = folder;
        }
    }
    if (!exact_specific.empty()) return exact_specific;
    if (!exact.empty()) return exact;
    return best_lower;
}

void set_kernel_dir(const std::string& path, const std::vector<std::string>& options,
                    const std::vector<std::string>& include_dirs,
                    const std::vector<std::string>& nvrtc_candidates) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_kernel_dir = path;
    g_options = options;
    g_include_dirs = include_dirs;
    g_nvrtc_candidates = nvrtc_candidates;
}

CUfunction BuiltinKernel::load(int device) const {
    check_device_ordinal(device);
    std::lock_guard<std::mutex> lock(g_mutex);
    auto key = std::make_pair(device, module_);
    auto it = g_modules.find(key);
    if (it == g_modules.end()) it = g_modules.emplace(key, load_module(device, module_)).first;
    CUfunction f = it->second->function(name_);
    functions_[device].store(f, std::memory_order_release);
    return f;
}

}  // namespace pgk
