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

/// `{"size": ..., "align": ..., "fields": [(name, offset), ...]}` of one struct, fields in
/// declaration order (from a `c_mirror!` struct's `layout()`).
fn struct_layout<'py>(
    py: Python<'py>,
    (size, align, fields): (usize, usize, Vec<(&'static str, usize)>),
) -> PyResult<Bound<'py, PyDict>> {
    let entry = PyDict::new(py);
    entry.set_item("size", size)?;
    entry.set_item("align", align)?;
    entry.set_item("fields", PyList::new(py, fields)?)?;
    Ok(entry)
}

/// The C API version, the size, alignment and field offsets of every struct in it (by their C
/// names), and the values of its constants.
#[pyfunction]
pub fn capi_layout(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let structs = PyDict::new(py);
    for (name, layout) in [
        ("pgk_device_backend", PgkDeviceBackend::layout()),
        ("pgk_pull_args", PgkPullArgs::layout()),
        ("pgk_block", PgkBlock::layout()),
        ("pgk_api", PgkApi::layout()),
    ] {
        structs.set_item(name, struct_layout(py, layout)?)?;
    }
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
