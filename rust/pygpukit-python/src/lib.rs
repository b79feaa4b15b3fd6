//! `pygpukit._rust`: Python bindings of the memory and scheduling core, and the
//! C API capsule `_C_API` that `pygpukit._native` imports at init.

mod capi;
mod capi_layout;
mod memory;
mod pyfmt;
mod runtime;
mod scheduler;
mod sizes;

use pyo3::exceptions::PyUserWarning;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::ffi::{c_void, CString};
use std::ptr::NonNull;

/// Applies `PYGPUKIT_MEMORY_LIMIT` to every pool; an unreadable value is
/// reported as a warning rather than breaking `import pygpukit`.
fn apply_env_limit(py: Python<'_>) -> PyResult<()> {
    let Ok(text) = std::env::var("PYGPUKIT_MEMORY_LIMIT") else {
        return Ok(());
    };
    if text.trim().is_empty() {
        return Ok(());
    }
    let outcome = pygpukit_core::limits::parse_limit(&text).and_then(|spec| {
        runtime::runtime()
            .set_limit(Some(spec), None)
            .map_err(|e| capi::describe(&e))
    });
    if let Err(message) = outcome {
        let message =
            CString::new(format!("PYGPUKIT_MEMORY_LIMIT ignored: {message}")).unwrap_or_default();
        PyErr::warn(py, &py.get_type::<PyUserWarning>(), &message, 1)?;
    }
    Ok(())
}

#[pymodule]
fn _rust(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("CAPI_VERSION", capi::PGK_CAPI_VERSION)?;
    let api = NonNull::from(&capi::API).cast::<c_void>();
    // SAFETY: API is a static that lives for the process and is never written.
    let capsule = unsafe { PyCapsule::new_with_pointer(py, api, capi::CAPSULE_NAME)? };
    m.add("_C_API", capsule)?;
    m.add_function(wrap_pyfunction!(capi_layout::capi_layout, m)?)?;
    m.add_function(wrap_pyfunction!(memory::default_device, m)?)?;
    m.add_function(wrap_pyfunction!(memory::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pool_stats, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pool_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(memory::set_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory::get_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory::empty_cache, m)?)?;
    m.add_function(wrap_pyfunction!(memory::parse_limit, m)?)?;
    m.add_function(wrap_pyfunction!(sizes::parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(memory::last_alloc_error, m)?)?;
    m.add_function(wrap_pyfunction!(memory::current_partition, m)?)?;
    m.add_function(wrap_pyfunction!(memory::set_current_partition, m)?)?;
    m.add_function(wrap_pyfunction!(memory::set_stream_inflight_limit, m)?)?;
    m.add_function(wrap_pyfunction!(memory::dispatch_stats, m)?)?;
    m.add_function(wrap_pyfunction!(memory::host_block, m)?)?;
    m.add_function(wrap_pyfunction!(memory::pinned_block, m)?)?;
    m.add_class::<memory::PinnedBlock>()?;
    m.add_class::<memory::Block>()?;
    m.add_class::<memory::HostView>()?;
    m.add_class::<memory::MemoryPool>()?;
    scheduler::register(m)?;
    apply_env_limit(py)?;
    Ok(())
}
