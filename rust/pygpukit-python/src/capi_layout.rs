//! The C API's layout as Rust compiles it: `_rust.capi_layout()`.
//!
//! `native/include/pygpukit/rust_capi.h` and the `#[repr(C)]` mirrors in `capi.rs` are written
//! by hand, so `_native` compares this description with its own (`_native.capi_layout()`, from
//! `sizeof` / `offsetof`) when it imports the capsule and refuses a mismatch, and
//! `tests/runtime/test_cross_language_facts.py` asserts that the two are equal.

use crate::capi::{
    PgkApi, PgkBlock, PgkDeviceBackend, PgkPullArgs, PGK_ALLOC_EVICTABLE, PGK_ALLOC_NO_WAIT,
    PGK_BACKEND_ERROR, PGK_CAPI_VERSION, PGK_DEVICE_TO_HOST, PGK_HOST_TO_DEVICE,
    PGK_INVALID_ARGUMENT, PGK_LIMIT_EXCEEDED, PGK_NO_BACKEND, PGK_OK, PGK_OUT_OF_MEMORY,
    PGK_WOULD_BLOCK,
};
use pygpukit_core::backend::PULL_FLAG_STRIDE;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::mem::{align_of, offset_of, size_of};

/// `{"size": ..., "align": ..., "fields": [(name, offset), ...]}` of one struct, fields in
/// declaration order.
macro_rules! struct_layout {
    ($py:expr, $ty:ty, [$($field:ident),* $(,)?]) => {{
        let entry = PyDict::new($py);
        entry.set_item("size", size_of::<$ty>())?;
        entry.set_item("align", align_of::<$ty>())?;
        let fields = PyList::empty($py);
        $( fields.append((stringify!($field), offset_of!($ty, $field)))?; )*
        entry.set_item("fields", fields)?;
        entry
    }};
}

/// The C API version, the size, alignment and field offsets of every struct in it (by their C
/// names), and the values of its constants.
#[pyfunction]
pub fn capi_layout(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let structs = PyDict::new(py);
    structs.set_item(
        "pgk_device_backend",
        struct_layout!(
            py,
            PgkDeviceBackend,
            [
                ctx,
                mem_alloc,
                mem_free,
                mem_get_info,
                host_alloc,
                host_free,
                event_create,
                event_destroy,
                event_record,
                event_query,
                event_synchronize,
                stream_wait_event,
                memcpy_async,
                stream_is_capturing,
                pull_launch,
            ]
        ),
    )?;
    structs.set_item(
        "pgk_pull_args",
        struct_layout!(
            py,
            PgkPullArgs,
            [
                dst,
                ring,
                ready,
                freed,
                counter,
                first_seq,
                nbytes,
                chunk_bytes,
                slots,
                ctas
            ]
        ),
    )?;
    structs.set_item("pgk_block", struct_layout!(py, PgkBlock, [id, ptr, size]))?;
    structs.set_item(
        "pgk_api",
        struct_layout!(
            py,
            PgkApi,
            [
                version,
                struct_size,
                register_backend,
                pool_alloc,
                pool_free,
                pool_touch,
                pool_graph_begin,
                pool_graph_end,
                pool_graph_release,
                dispatch_begin,
                dispatch_end,
                last_error,
                transfer_configure,
                transfer_submit,
                transfer_stream_wait,
                transfer_wait,
                transfer_release,
                pool_touch_all,
            ]
        ),
    )?;
    let constants = PyDict::new(py);
    for (name, value) in [
        ("PGK_OK", PGK_OK as i64),
        ("PGK_OUT_OF_MEMORY", PGK_OUT_OF_MEMORY as i64),
        ("PGK_LIMIT_EXCEEDED", PGK_LIMIT_EXCEEDED as i64),
        ("PGK_BACKEND_ERROR", PGK_BACKEND_ERROR as i64),
        ("PGK_INVALID_ARGUMENT", PGK_INVALID_ARGUMENT as i64),
        ("PGK_NO_BACKEND", PGK_NO_BACKEND as i64),
        ("PGK_WOULD_BLOCK", PGK_WOULD_BLOCK as i64),
        ("PGK_HOST_TO_DEVICE", PGK_HOST_TO_DEVICE as i64),
        ("PGK_DEVICE_TO_HOST", PGK_DEVICE_TO_HOST as i64),
        ("PGK_ALLOC_EVICTABLE", PGK_ALLOC_EVICTABLE as i64),
        ("PGK_ALLOC_NO_WAIT", PGK_ALLOC_NO_WAIT as i64),
        ("PGK_PULL_FLAG_STRIDE", PULL_FLAG_STRIDE as i64),
    ] {
        constants.set_item(name, value)?;
    }
    let layout = PyDict::new(py);
    layout.set_item("version", PGK_CAPI_VERSION)?;
    layout.set_item("structs", structs)?;
    layout.set_item("constants", constants)?;
    Ok(layout)
}
