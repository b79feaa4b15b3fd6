#include "core/capi_layout.hpp"

#include <cstddef>

#include "pygpukit/rust_capi.h"

namespace py = pybind11;

namespace pgk {

namespace {

#define PGK_FIELD(type, field) py::make_tuple(#field, offsetof(type, field))

template <typename T>
py::dict struct_layout(py::list fields) {
    py::dict entry;
    entry["size"] = sizeof(T);
    entry["align"] = alignof(T);
    entry["fields"] = fields;
    return entry;
}

}  // namespace

py::dict capi_layout() {
    py::dict structs;
    structs["pgk_device_backend"] = struct_layout<pgk_device_backend>(py::list(py::make_tuple(
        PGK_FIELD(pgk_device_backend, ctx), PGK_FIELD(pgk_device_backend, mem_alloc),
        PGK_FIELD(pgk_device_backend, mem_free), PGK_FIELD(pgk_device_backend, mem_get_info),
        PGK_FIELD(pgk_device_backend, host_alloc), PGK_FIELD(pgk_device_backend, host_free),
        PGK_FIELD(pgk_device_backend, event_create), PGK_FIELD(pgk_device_backend, event_destroy),
        PGK_FIELD(pgk_device_backend, event_record), PGK_FIELD(pgk_device_backend, event_query),
        PGK_FIELD(pgk_device_backend, event_synchronize),
        PGK_FIELD(pgk_device_backend, stream_wait_event),
        PGK_FIELD(pgk_device_backend, memcpy_async),
        PGK_FIELD(pgk_device_backend, stream_is_capturing),
        PGK_FIELD(pgk_device_backend, pull_launch))));
    structs["pgk_pull_args"] = struct_layout<pgk_pull_args>(py::list(
        py::make_tuple(PGK_FIELD(pgk_pull_args, dst), PGK_FIELD(pgk_pull_args, ring),
                       PGK_FIELD(pgk_pull_args, ready), PGK_FIELD(pgk_pull_args, freed),
                       PGK_FIELD(pgk_pull_args, counter), PGK_FIELD(pgk_pull_args, first_seq),
                       PGK_FIELD(pgk_pull_args, nbytes), PGK_FIELD(pgk_pull_args, chunk_bytes),
                       PGK_FIELD(pgk_pull_args, slots), PGK_FIELD(pgk_pull_args, ctas))));
    structs["pgk_block"] = struct_layout<pgk_block>(py::list(py::make_tuple(
        PGK_FIELD(pgk_block, id), PGK_FIELD(pgk_block, ptr), PGK_FIELD(pgk_block, size))));
    structs["pgk_api"] = struct_layout<pgk_api>(py::list(
        py::make_tuple(PGK_FIELD(pgk_api, version), PGK_FIELD(pgk_api, struct_size),
                       PGK_FIELD(pgk_api, register_backend), PGK_FIELD(pgk_api, pool_alloc),
                       PGK_FIELD(pgk_api, pool_free), PGK_FIELD(pgk_api, pool_touch),
                       PGK_FIELD(pgk_api, pool_graph_begin), PGK_FIELD(pgk_api, pool_graph_end),
                       PGK_FIELD(pgk_api, pool_graph_release), PGK_FIELD(pgk_api, dispatch_begin),
                       PGK_FIELD(pgk_api, dispatch_end), PGK_FIELD(pgk_api, last_error),
                       PGK_FIELD(pgk_api, transfer_configure), PGK_FIELD(pgk_api, transfer_submit),
                       PGK_FIELD(pgk_api, transfer_stream_wait), PGK_FIELD(pgk_api, transfer_wait),
                       PGK_FIELD(pgk_api, transfer_release), PGK_FIELD(pgk_api, pool_touch_all))));
    py::dict constants;
    constants["PGK_OK"] = static_cast<int>(PGK_OK);
    constants["PGK_OUT_OF_MEMORY"] = static_cast<int>(PGK_OUT_OF_MEMORY);
    constants["PGK_LIMIT_EXCEEDED"] = static_cast<int>(PGK_LIMIT_EXCEEDED);
    constants["PGK_BACKEND_ERROR"] = static_cast<int>(PGK_BACKEND_ERROR);
    constants["PGK_INVALID_ARGUMENT"] = static_cast<int>(PGK_INVALID_ARGUMENT);
    constants["PGK_NO_BACKEND"] = static_cast<int>(PGK_NO_BACKEND);
    constants["PGK_WOULD_BLOCK"] = static_cast<int>(PGK_WOULD_BLOCK);
    constants["PGK_HOST_TO_DEVICE"] = PGK_HOST_TO_DEVICE;
    constants["PGK_DEVICE_TO_HOST"] = PGK_DEVICE_TO_HOST;
    constants["PGK_ALLOC_EVICTABLE"] = PGK_ALLOC_EVICTABLE;
    constants["PGK_ALLOC_NO_WAIT"] = PGK_ALLOC_NO_WAIT;
    constants["PGK_PULL_FLAG_STRIDE"] = PGK_PULL_FLAG_STRIDE;
    py::dict layout;
    layout["version"] = PGK_CAPI_VERSION;
    layout["structs"] = structs;
    layout["constants"] = constants;
    return layout;
}

std::string capi_layout_mismatch() {
    try {
        py::object rust = py::module_::import("pygpukit._rust").attr("capi_layout")();
        py::dict mine = capi_layout();
        if (rust.equal(mine)) return "";
        if (!rust["version"].equal(mine["version"])) {
            return "C API version " + std::string(py::str(rust["version"])) + " (Rust) vs " +
                   std::string(py::str(mine["version"])) + " (C++)";
        }
        for (const char* part : {"structs", "constants"}) {
            py::dict theirs = rust[part], ours = mine[part];
            for (auto item : ours) {
                py::object other = py::none();
                if (theirs.contains(item.first)) other = theirs[item.first];
                if (!other.equal(item.second)) {
                    return std::string(py::str(item.first)) + ": " + std::string(py::str(other)) +
                           " (Rust) vs " + std::string(py::str(item.second)) + " (C++)";
                }
            }
        }
        return "Rust describes more than C++: " + std::string(py::str(rust));
    } catch (py::error_already_set& e) {
        return std::string("pygpukit._rust.capi_layout() failed: ") + e.what();
    }
}

}  // namespace pgk
