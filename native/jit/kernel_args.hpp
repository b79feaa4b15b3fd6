// Launching a user kernel from Python: each argument packed in C++ by its parameter type code
// (set once from the parsed signature), then the shared launch path (dispatch controller).
#pragma once

#include <pybind11/pybind11.h>

#include "core/launch.hpp"
#include "core/stream.hpp"
#include "jit/module.hpp"

namespace pgk {

// A grid or block: an int or a tuple of 1 to 3 positive ints. std::invalid_argument otherwise.
void parse_dim3(pybind11::handle value, unsigned out[3], const char* what);

// Packs `args` by f.signature() (TypeError naming the parameter on a mismatch, before anything
// is enqueued) and launches on `stream`.
void launch_function(const Function& f, const LaunchConfig& config, const StreamPtr& stream,
                     pybind11::tuple args);

}  // namespace pgk
