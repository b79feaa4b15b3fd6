//! Python functions and classes over the memory pools, used by `pygpukit.memory`.
//!
//! The CPU backend allocates host blocks here too, so limits and stats behave
//! as on a GPU. Under abi3-py310 PyO3 cannot implement the buffer protocol
//! (`Py_buffer` entered the limited API in 3.11), so a host [`Block`] exposes
//! NumPy's `__array_interface__` instead: `numpy.asarray(block)` is a writable
//! `uint8` view whose `.base` is the block, keeping the memory alive.
//!
//! Calls that may wait on the device (allocation under pressure, touch,
//! free, limits, empty_cache) release the GIL: the backend contract says
//! `event_synchronize` runs without it.

use crate::capi::{self, alloc_error_of, describe};
use crate::runtime::runtime;
use pygpukit_core::limits::{self, LimitSpec, PartitionId};
use pygpukit_core::pinned::PinnedBuf;
use pygpukit_core::pool::{AllocError, AllocOptions};
use pygpukit_core::runtime::{RuntimeError, HOST_DEVICE};
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// The device Python calls default to: 0 once a GPU backend is registered, else the host (-1).
#[pyfunction]
pub fn default_device() -> i32 {
    if runtime().device_count() > 0 {
        0
    } else {
        HOST_DEVICE
    }
}

/// Devices with a registered GPU backend.
#[pyfunction]
pub fn device_count() -> i32 {
    runtime().device_count()
}

fn device_or_default(device: Option<i32>) -> i32 {
    device.unwrap_or_else(default_device)
}

/// `pygpukit.errors.OutOfMemoryError(requested, in_use, limit, partition)`, or
/// `MemoryError` if that module cannot be imported.
fn out_of_memory(py: Python<'_>, a: &AllocError) -> PyErr {
    let partition = a
        .partition
        .map(|p| runtime().partition_name(p).unwrap_or_else(|| p.to_string()));
    let built = py
        .import("pygpukit.errors")
        .and_then(|m| m.getattr("OutOfMemoryError"))
        .and_then(|cls| cls.call1((a.requested, a.in_use, a.limit, partition)));
    match built {
        Ok(err) => PyErr::from_value(err),
        Err(_) => PyMemoryError::new_err(describe(&RuntimeError::Pool(
            pygpukit_core::pool::PoolError::Alloc(a.clone()),
        ))),
    }
}

/// Converts a registry error into the Python exception a user should see.
pub fn to_py_err(py: Python<'_>, err: RuntimeError) -> PyErr {
    // Python and C++ callers see the same last error and last allocation failure.
    capi::status_of(&err);
    if let Some(a) = alloc_error_of(&err) {
        if !matches!(a.kind, pygpukit_core::pool::AllocErrorKind::Backend(_)) {
            return out_of_memory(py, a);
        }
    }
    match err {
        RuntimeError::Pool(pygpukit_core::pool::PoolError::UnknownBlock(_)) => {
            PyValueError::new_err(describe(&err))
        }
        _ => PyRuntimeError::new_err(describe(&err)),
    }
}

/// Flat counters of one pool: bytes, counts and `partition.<id>.*` entries.
#[pyfunction]
#[pyo3(signature = (device=None))]
pub fn pool_stats<'py>(py: Python<'py>, device: Option<i32>) -> PyResult<Bound<'py, PyDict>> {
    let device = device_or_default(device);
    let rt = runtime();
    let flat = rt.pool(device).map_err(|e| to_py_err(py, e))?.flat_stats();
    let dict = PyDict::new(py);
    for (k, v) in flat {
        dict.set_item(k, v)?;
    }
    // The transfer engine's staging buffers: the rest of the pinned memory the runtime holds.
    dict.set_item(
        "transfer_staging_bytes",
        rt.transfer_staging_reserved(device),
    )?;
    dict.set_item("upload_kernel_uploads", rt.transfer_kernel_uploads(device))?;
    Ok(dict)
}

/// Every live block and free range of one pool, as dicts.
#[pyfunction]
#[pyo3(signature = (device=None))]
pub fn pool_snapshot<'py>(py: Python<'py>, device: Option<i32>) -> PyResult<Bound<'py, PyList>> {
    let device = device_or_default(device);
    let blocks = runtime()
        .pool(device)
        .map_err(|e| to_py_err(py, e))?
        .snapshot();
    let list = PyList::empty(py);
    for b in blocks {
        let d = PyDict::new(py);
        d.set_item("id", b.id)?;
        d.set_item("device", device)?;
        d.set_item("address", b.ptr)?;
        d.set_item("size", b.size)?;
        d.set_item("requested", b.requested)?;
        d.set_item("stream", b.stream)?;
        d.set_item("state", b.state.name())?;
        d.set_item("partition", b.partition)?;
        d.set_item("evictable", b.evictable)?;
        d.set_item("graph_pool", b.graph_pool)?;
        d.set_item("age_s", b.age_s)?;
        list.append(d)?;
    }
    Ok(list)
}

/// Reads a limit argument: `None`, bytes (int >= 0) or a fraction (float in (0, 1]).
fn limit_spec(limit: Option<&Bound<'_, PyAny>>) -> PyResult<Option<LimitSpec>> {
    let Some(value) = limit else { return Ok(None) };
    if value.is_none() {
        return Ok(None);
    }
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(
            "a memory limit is bytes (int), a fraction (float) or None, not a bool",
        ));
    }
    if let Ok(bytes) = value.extract::<i128>() {
        return u64::try_from(bytes)
            .map(|b| Some(LimitSpec::Bytes(b)))
            .map_err(|_| {
                PyValueError::new_err(format!("a memory limit in bytes must be >= 0, got {bytes}"))
            });
    }
    if let Ok(f) = value.extract::<f64>() {
        return LimitSpec::fraction(f)
            .map(Some)
            .map_err(PyValueError::new_err);
    }
    Err(PyTypeError::new_err(
        "a memory limit is bytes (int), a fraction (float) or None",
    ))
}

/// Sets the global limit of `device`, or of every pool (present and future) when `device` is None.
#[pyfunction]
#[pyo3(signature = (limit, device=None))]
pub fn set_limit(
    py: Python<'_>,
    limit: Option<&Bound<'_, PyAny>>,
    device: Option<i32>,
) -> PyResult<()> {
    let spec = limit_spec(limit)?;
    py.detach(|| runtime().set_limit(spec, device))
        .map_err(|e| to_py_err(py, e))
}

/// The global limit of a pool in bytes, or None.
#[pyfunction]
#[pyo3(signature = (device=None))]
pub fn get_limit(py: Python<'_>, device: Option<i32>) -> PyResult<Option<u64>> {
    Ok(runtime()
        .pool(device_or_default(device))
        .map_err(|e| to_py_err(py, e))?
        .limit())
}

/// Releases cached memory of one pool, or of every pool; returns the bytes released.
#[pyfunction]
#[pyo3(signature = (device=None))]
pub fn empty_cache(py: Python<'_>, device: Option<i32>) -> PyResult<u64> {
    py.detach(|| runtime().empty_cache(device))
        .map_err(|e| to_py_err(py, e))
}

/// Parses a `PYGPUKIT_MEMORY_LIMIT` value: an int (bytes) or a float (fraction).
#[pyfunction]
pub fn parse_limit(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    match limits::parse_limit(text).map_err(PyValueError::new_err)? {
        LimitSpec::Bytes(b) => Ok(b.into_pyobject(py)?.into_any().unbind()),
        LimitSpec::Fraction(f) => Ok(f.into_pyobject(py)?.into_any().unbind()),
    }
}

/// This thread's last failed allocation as a dict, or None.
#[pyfunction]
pub fn last_alloc_error<'py>(py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(a) = capi::last_alloc_error() else {
        return Ok(None);
    };
    let d = PyDict::new(py);
    d.set_item("requested", a.requested)?;
    d.set_item("in_use", a.in_use)?;
    d.set_item("limit", a.limit)?;
    d.set_item(
        "partition",
        a.partition
            .map(|p| runtime().partition_name(p).unwrap_or_else(|| p.to_string())),
    )?;
    Ok(Some(d))
}

/// The partition charged for allocations made by this thread.
#[pyfunction]
pub fn current_partition() -> PartitionId {
    limits::current_partition()
}

/// Makes `partition` current for this thread; returns the previous one.
#[pyfunction]
pub fn set_current_partition(partition: PartitionId) -> PartitionId {
    limits::set_current_partition(partition)
}

/// Sets (or with None removes) the in-flight launch limit of a stream.
#[pyfunction]
#[pyo3(signature = (device, stream, limit))]
pub fn set_stream_inflight_limit(device: i32, stream: u64, limit: Option<u32>) {
    runtime().dispatch().set_stream_limit(device, stream, limit);
}

/// Dispatch counters: `begun`, `failed`, and per limited stream `stream.<device>.<handle>.<counter>`.
#[pyfunction]
pub fn dispatch_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = runtime().dispatch().stats();
    let d = PyDict::new(py);
    d.set_item("begun", s.begun)?;
    d.set_item("failed", s.failed)?;
    for st in s.streams {
        let key = |name: &str| format!("stream.{}.{:#x}.{name}", st.device, st.stream);
        d.set_item(key("in_flight"), st.in_flight)?;
        d.set_item(key("launched"), st.launched)?;
        d.set_item(key("completed"), st.completed)?;
        d.set_item(key("failed"), st.failed)?;
        if let Some(l) = st.limit {
            d.set_item(key("limit"), l)?;
        }
    }
    Ok(d)
}

/// A block of a pool. Freed by `free()` or when garbage-collected.
///
/// An evictable block may be spilled by later allocations and moves when
/// restored: read `address` (or build the NumPy view) right before each use.
#[pyclass(module = "pygpukit._rust")]
pub struct Block {
    #[pyo3(get)]
    id: u64,
    #[pyo3(get)]
    device: i32,
    #[pyo3(get)]
    size: u64,
    #[pyo3(get)]
    nbytes: u64,
    #[pyo3(get)]
    evictable: bool,
    address: u64,
    stream: u64,
    freed: bool,
}

impl Block {
    fn live(&self) -> PyResult<()> {
        if self.freed {
            Err(PyValueError::new_err(format!(
                "block {} was already freed",
                self.id
            )))
        } else {
            Ok(())
        }
    }
}

#[pymethods]
impl Block {
    /// Address of the block's memory (device address on a GPU, host address on the CPU backend).
    #[getter]
    fn address(&self) -> PyResult<u64> {
        self.live()?;
        Ok(self.address)
    }

    /// Gives the block back to its pool; its last use was on `stream` (default: its own).
    #[pyo3(signature = (stream=None))]
    fn free(&mut self, py: Python<'_>, stream: Option<u64>) -> PyResult<()> {
        self.live()?;
        self.freed = true;
        let (id, stream) = (self.id, stream.unwrap_or(self.stream));
        py.detach(|| runtime().free(id, stream))
            .map_err(|e| to_py_err(py, e))
    }

    /// Before use on `stream`: restores a spilled block, marks it recently used; returns its address.
    #[pyo3(signature = (stream=None))]
    fn touch(&mut self, py: Python<'_>, stream: Option<u64>) -> PyResult<u64> {
        self.live()?;
        let (id, stream) = (self.id, stream.unwrap_or(self.stream));
        let b = py
            .detach(|| runtime().touch(id, stream))
            .map_err(|e| to_py_err(py, e))?;
        self.address = b.ptr;
        Ok(b.ptr)
    }

    #[getter]
    fn freed(&self) -> bool {
        self.freed
    }

    /// NumPy's array interface (host blocks only): a writable uint8 view of `nbytes`.
    #[getter]
    fn __array_interface__<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.live()?;
        if self.device != HOST_DEVICE {
            return Err(PyTypeError::new_err(
                "only host blocks (CPU backend) can be viewed as NumPy arrays",
            ));
        }
        // A host block may have been spilled only if evictable; host pools never spill (no limit pressure
        // from a GPU), but touch keeps the address right either way.
        let address = self.touch(py, None)?;
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (self.nbytes,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (address, false))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let state = if self.freed { "freed" } else { "live" };
        format!(
            "Block(id={}, device={}, nbytes={}, size={}, {state})",
            self.id, self.device, self.nbytes, self.size
        )
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if !self.freed {
            // Nothing to report to at garbage collection: an unknown id only means it was freed already.
            let _ = runtime().free(self.id, self.stream);
        }
    }
}

fn allocate_block(
    py: Python<'_>,
    device: i32,
    nbytes: u64,
    stream: u64,
    evictable: bool,
    partition: PartitionId,
) -> PyResult<Block> {
    let options = AllocOptions {
        evictable,
        ..AllocOptions::default()
    };
    let b = py
        .detach(|| runtime().alloc_in(device, nbytes, stream, options, partition))
        .map_err(|e| to_py_err(py, e))?;
    Ok(Block {
        id: b.id,
        device,
        size: b.size,
        nbytes,
        evictable,
        address: b.ptr,
        stream,
        freed: false,
    })
}

/// A host block of `nbytes` from the host pool (the CPU backend's allocator),
/// charged to this thread's current partition.
#[pyfunction]
pub fn host_block(py: Python<'_>, nbytes: u64) -> PyResult<Block> {
    allocate_block(
        py,
        HOST_DEVICE,
        nbytes,
        0,
        false,
        limits::current_partition(),
    )
}

/// Page-locked host memory from a device pool's pinned cache (accounted in
/// `pinned_reserved_bytes`), viewed by NumPy through `__array_interface__`.
/// Goes back to the cache when garbage-collected; the owner must not drop it
/// while an asynchronous copy still reads or writes it.
#[pyclass(module = "pygpukit._rust")]
pub struct PinnedBlock {
    #[pyo3(get)]
    device: i32,
    #[pyo3(get)]
    nbytes: u64,
    buf: PinnedBuf,
}

#[pymethods]
impl PinnedBlock {
    /// Host address of the memory.
    #[getter]
    fn address(&self) -> u64 {
        self.buf.ptr
    }

    /// NumPy's array interface: a writable uint8 view of `nbytes`.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (self.nbytes,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.buf.ptr, false))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "PinnedBlock(device={}, nbytes={}, address={:#x})",
            self.device, self.nbytes, self.buf.ptr
        )
    }
}

impl Drop for PinnedBlock {
    fn drop(&mut self) {
        if let Ok(mut pool) = runtime().pool(self.device) {
            // Nothing to report to at garbage collection; a failed release keeps the buffer out of reuse.
            let _ = pool.pinned_release(self.buf, None);
        }
    }
}

/// `nbytes` of page-locked host memory from `device`'s pinned cache (the
/// host pool's plain memory on the CPU backend).
#[pyfunction]
#[pyo3(signature = (nbytes, device=None))]
pub fn pinned_block(py: Python<'_>, nbytes: u64, device: Option<i32>) -> PyResult<PinnedBlock> {
    let device = device_or_default(device);
    let buf = py
        .detach(|| {
            let rt = runtime();
            let buf = rt.pool(device)?.pinned_acquire(nbytes.max(1))?;
            Ok::<_, RuntimeError>(buf)
        })
        .map_err(|e| to_py_err(py, e))?;
    Ok(PinnedBlock {
        device,
        nbytes,
        buf,
    })
}

/// A pool with its own quota: a partition of the device pool, so its blocks
/// share the cache but its bytes are accounted and limited separately.
#[pyclass(module = "pygpukit._rust")]
pub struct MemoryPool {
    #[pyo3(get)]
    partition: PartitionId,
    #[pyo3(get)]
    quota: Option<u64>,
    #[pyo3(get)]
    enable_eviction: bool,
    #[pyo3(get)]
    device: i32,
    #[pyo3(get)]
    name: String,
}

#[pymethods]
impl MemoryPool {
    #[new]
    #[pyo3(signature = (quota=None, enable_eviction=false, name=None, device=None))]
    fn new(
        py: Python<'_>,
        quota: Option<u64>,
        enable_eviction: bool,
        name: Option<String>,
        device: Option<i32>,
    ) -> PyResult<Self> {
        let device = device_or_default(device);
        let rt = runtime();
        // Fail at construction, not at the first allocation, for a device without a backend.
        rt.pool(device).map(drop).map_err(|e| to_py_err(py, e))?;
        let name = name.unwrap_or_else(|| "MemoryPool".to_string());
        let partition = rt
            .create_partition(&name, quota)
            .map_err(|e| to_py_err(py, e))?;
        Ok(Self {
            partition,
            quota,
            enable_eviction,
            device,
            name,
        })
    }

    /// A block of at least `nbytes`, usable on `stream`.
    #[pyo3(signature = (nbytes, stream=0))]
    fn allocate(&self, py: Python<'_>, nbytes: u64, stream: u64) -> PyResult<Block> {
        allocate_block(
            py,
            self.device,
            nbytes,
            stream,
            self.enable_eviction,
            self.partition,
        )
    }

    /// This pool's bytes: `allocated_bytes`, `peak_allocated_bytes`, `quota_bytes` (if any).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let u = runtime()
            .pool(self.device)
            .map_err(|e| to_py_err(py, e))?
            .partition_usage(self.partition);
        let d = PyDict::new(py);
        d.set_item("allocated_bytes", u.allocated)?;
        d.set_item("peak_allocated_bytes", u.peak)?;
        if let Some(q) = u.limit {
            d.set_item("quota_bytes", q)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "MemoryPool(name={:?}, quota={}, enable_eviction={}, device={})",
            self.name,
            crate::pyfmt::opt(self.quota),
            crate::pyfmt::flag(self.enable_eviction),
            self.device
        )
    }
}
