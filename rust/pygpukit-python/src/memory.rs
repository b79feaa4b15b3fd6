//! Python functions and classes over the memory pools, used by `pygpukit.memory`.
//!
//! The CPU backend allocates host blocks here too, so limits and stats behave
//! as on a GPU. Under abi3-py310 PyO3 cannot implement the buffer protocol
//! (`Py_buffer` entered the limited API in 3.11), so host memory is viewed by
//! NumPy through `__array_interface__`.
//!
//! Host views keep their memory alive and `free()` refuses while any exists:
//! `numpy.asarray(block)` goes through `Block.__array__`, which hands NumPy a
//! [`HostView`] (the view's `.base`) that holds the block, counts itself in the
//! block's live views and keeps the block in place (never spilled) while it
//! lives. So no view can outlive the memory it reads, and no write through a
//! view can land in a later allocation. A [`PinnedBlock`] has no `free()`: its
//! NumPy views (`pinned_empty`) hold it, and it goes back to the pinned cache
//! with the last of them.
//!
//! Calls that may wait on the device (allocation under pressure, touch,
//! free, limits, empty_cache) release the GIL: the backend contract says
//! `event_synchronize` runs without it.

use crate::capi::{self, alloc_error_of, describe};
use crate::runtime::runtime;
use crate::sizes::{opt_size_arg, size_arg};
use pygpukit_core::limits::{self, LimitSpec, PartitionId};
use pygpukit_core::pinned::PinnedBuf;
use pygpukit_core::pool::{AllocError, AllocOptions};
use pygpukit_core::runtime::{RuntimeError, HOST_DEVICE};
use pyo3::exceptions::{PyBufferError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
    // The default partition is "outside every partition": no partition to name.
    let partition = a
        .partition
        .filter(|&p| p != limits::DEFAULT_PARTITION)
        .map(|p| runtime().partition_name(p).unwrap_or_else(|| p.to_string()));
    let built = py
        .import("pygpukit.errors")
        .and_then(|m| m.getattr("OutOfMemoryError"))
        .and_then(|cls| cls.call1((a.requested, a.in_use, a.limit, partition, limit_exceeded(a))));
    match built {
        Ok(err) => PyErr::from_value(err),
        Err(_) => PyMemoryError::new_err(describe(&RuntimeError::Pool(
            pygpukit_core::pool::PoolError::Alloc(a.clone()),
        ))),
    }
}

/// Whether a limit (a partition's quota or the global limit) refused the allocation, rather
/// than the device or other partitions' reservations.
fn limit_exceeded(a: &AllocError) -> bool {
    matches!(a.kind, pygpukit_core::pool::AllocErrorKind::LimitExceeded)
}

/// Converts a registry error into the Python exception a user should see.
pub fn to_py_err(py: Python<'_>, err: RuntimeError) -> PyErr {
    // Python and C++ callers see the same last error and last allocation failure.
    capi::status_of(&err);
    if let Some(a) = alloc_error_of(&err) {
        use pygpukit_core::pool::AllocErrorKind::{Backend, PartitionRetired};
        if !matches!(a.kind, Backend(_) | PartitionRetired) {
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
    d.set_item("limit_exceeded", limit_exceeded(&a))?;
    d.set_item(
        "partition",
        a.partition
            .filter(|&p| p != limits::DEFAULT_PARTITION)
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
/// restored: read `address` right before each use. A NumPy view of a host
/// block keeps it in place and alive; `free()` refuses while one exists.
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
    /// Live [`HostView`]s of this block.
    views: Arc<AtomicUsize>,
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
    /// Raises `BufferError` while NumPy views of it exist.
    #[pyo3(signature = (stream=None))]
    fn free(&mut self, py: Python<'_>, stream: Option<u64>) -> PyResult<()> {
        self.live()?;
        let views = self.views.load(Ordering::Acquire);
        if views > 0 {
            return Err(PyBufferError::new_err(format!(
                "block {} cannot be freed while {views} NumPy view(s) of it exist: delete them \
                 first (`del view`; views in reference cycles go at the next gc.collect()), or \
                 drop the block instead and it returns to the pool with its last view",
                self.id
            )));
        }
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

    /// `numpy.asarray(block)` (host blocks only): a writable `uint8` view of `nbytes`
    /// whose base is a [`HostView`] holding the block. `copy=True` returns a copy
    /// instead; a `dtype` other than `uint8` casts (a copy, so not with `copy=False`).
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let view = {
            let block = slf.borrow();
            block.live()?;
            if block.device != HOST_DEVICE {
                return Err(PyTypeError::new_err(
                    "only host blocks (CPU backend) can be viewed as NumPy arrays",
                ));
            }
            let (id, stream) = (block.id, block.stream);
            // Touched (restored, if spilled) and held in place for the view's life.
            let b = py
                .detach(|| runtime().hold_in_place(id, stream))
                .map_err(|e| to_py_err(py, e))?;
            block.views.fetch_add(1, Ordering::AcqRel);
            HostView {
                block: slf.clone().unbind(),
                id,
                address: b.ptr,
                nbytes: block.nbytes,
                views: block.views.clone(),
            }
        };
        let asarray = numpy_asarray(py)?;
        let array = asarray.call1((Bound::new(py, view)?,))?;
        let wants_cast = match dtype {
            Some(dt) if !dt.is_none() => !dt.eq(array.getattr("dtype")?)?,
            _ => false,
        };
        if wants_cast && copy == Some(false) {
            return Err(PyValueError::new_err(
                "a block is viewed as uint8 bytes: a NumPy view of another dtype needs a cast \
                 (copy=False refuses it); take numpy.asarray(block).view(dtype) instead",
            ));
        }
        if wants_cast {
            return array.call_method1("astype", (dtype,));
        }
        if copy == Some(true) {
            return array.call_method0("copy");
        }
        Ok(array)
    }

    /// How many NumPy views of the block exist now.
    #[getter]
    fn views(&self) -> usize {
        self.views.load(Ordering::Acquire)
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
        views: Arc::new(AtomicUsize::new(0)),
    })
}

/// `numpy.asarray`, looked up once.
fn numpy_asarray(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static ASARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    ASARRAY
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("numpy")?.getattr("asarray")?.unbind())
        })
        .map(|f| f.bind(py))
}

/// The base of a NumPy view of a host [`Block`]: holds the block (so the block is not
/// freed by garbage collection while the view lives), counts in its live views (so
/// `free()` refuses) and keeps it in place in its pool (never spilled) until it goes.
#[pyclass(module = "pygpukit._rust", frozen)]
pub struct HostView {
    block: Py<Block>,
    id: u64,
    address: u64,
    nbytes: u64,
    views: Arc<AtomicUsize>,
}

#[pymethods]
impl HostView {
    /// NumPy's array interface: a writable uint8 view of the block's `nbytes`.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (self.nbytes,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.address, false))?;
        Ok(d)
    }

    /// The block this view reads.
    #[getter]
    fn block(&self, py: Python<'_>) -> Py<Block> {
        self.block.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "HostView(block={}, nbytes={}, address={:#x})",
            self.id, self.nbytes, self.address
        )
    }
}

impl Drop for HostView {
    fn drop(&mut self) {
        // Nothing to report to at garbage collection; a freed block has no hold left anyway.
        let _ = runtime().release_in_place(self.id);
        self.views.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A host block of `nbytes` (an int or a size string) from the host pool (the CPU
/// backend's allocator), charged to this thread's current partition.
#[pyfunction]
pub fn host_block(py: Python<'_>, nbytes: &Bound<'_, PyAny>) -> PyResult<Block> {
    let nbytes = size_arg(nbytes, "nbytes")?;
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
pub fn pinned_block(
    py: Python<'_>,
    nbytes: &Bound<'_, PyAny>,
    device: Option<i32>,
) -> PyResult<PinnedBlock> {
    let nbytes = size_arg(nbytes, "nbytes")?;
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
        quota: Option<&Bound<'_, PyAny>>,
        enable_eviction: bool,
        name: Option<String>,
        device: Option<i32>,
    ) -> PyResult<Self> {
        let quota = opt_size_arg(quota, "MemoryPool(quota)")?;
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

    /// A block of at least `nbytes` (an int or a size string), usable on `stream`.
    #[pyo3(signature = (nbytes, stream=0))]
    fn allocate(&self, py: Python<'_>, nbytes: &Bound<'_, PyAny>, stream: u64) -> PyResult<Block> {
        let nbytes = size_arg(nbytes, "MemoryPool.allocate(nbytes)")?;
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
