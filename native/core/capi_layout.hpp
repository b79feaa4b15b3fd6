// The C API's layout as C++ compiles it (native/include/pygpukit/rust_capi.h), in the form
// pygpukit._rust.capi_layout() describes Rust's #[repr(C)] mirrors: the header and the mirrors are
// written by hand, so the two descriptions are compared when the capsule is imported and by
// tests/runtime/test_cross_language_facts.py.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace pgk {

// {"version": PGK_CAPI_VERSION, "structs": {name: {"size", "align", "fields": [(name, offset)]}},
//  "constants": {name: value}}. Needs the GIL.
pybind11::dict capi_layout();

// "" when pygpukit._rust.capi_layout() equals capi_layout(), else what differs first. Needs the
// GIL; never throws.
std::string capi_layout_mismatch();

}  // namespace pgk
