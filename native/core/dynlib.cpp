#include "core/dynlib.hpp"

#include <dlfcn.h>

namespace pgk {

LoadAttempt open_first(const std::vector<std::string>& candidates, const char* required_symbol) {
    LoadAttempt result;
    for (const std::string& candidate : candidates) {
        void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
            const char* err = dlerror();
            result.tried.emplace_back(candidate, err ? err : "dlopen failed");
            continue;
        }
        if (dlsym(handle, required_symbol) == nullptr) {
            result.tried.emplace_back(candidate, std::string("no symbol ") + required_symbol);
            dlclose(handle);
            continue;
        }
        result.handle = handle;
        result.path = candidate;
        return result;
    }
    return result;
}

}  // namespace pgk
