// Opening a shared library from an ordered candidate list (paths or bare sonames), remembering
// why each candidate failed so the caller can list them all. Used for libcuda and libnvrtc.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace pgk {

struct LoadAttempt {
    void* handle = nullptr;  // dlopen handle of the first candidate that opened, else nullptr
    std::string path;        // that candidate
    std::vector<std::pair<std::string, std::string>> tried;  // (candidate, dlerror) of failures
};

// dlopen each candidate in order (RTLD_NOW | RTLD_LOCAL) and stop at the first that opens and
// exports `required_symbol`.
LoadAttempt open_first(const std::vector<std::string>& candidates, const char* required_symbol);

}  // namespace pgk
