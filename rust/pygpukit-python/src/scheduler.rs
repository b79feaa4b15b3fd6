//! Python classes of the scheduler core (`pygpukit._rust`): the product brief's
//! `QosPolicyEvaluator`, `QosTaskMeta`, `PartitionManager`, `PartitionConfig`,
//! `PartitionLimits` and `Partition`, plus `SchedulerCore`, the run queue and task
//! state machine that `pygpukit.scheduler` drives.
//!
//! Locking rule: a core object's mutex is never held while Python runs (an
//! import or an exception constructor may release the GIL, and a thread waiting
//! for the mutex would then hold the GIL forever). Every method computes a plain
//! Rust result under the lock and converts it to Python objects after.

use crate::capi::describe;
use crate::runtime::runtime;
use crate::sizes::{opt_size_arg, size_arg};
use pygpukit_core::pool::PartitionQos;
use pygpukit_core::scheduler::{
    self as core, AdmissionError, ComputeShare, Outcome, PacingConfig, PartitionError,
    PartitionSpec, SchedulerError, TaskRequest, WHOLE_DEVICE,
};
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// `pygpukit.errors.AdmissionError(message)` with the refusal's details as attributes.
fn admission_error(py: Python<'_>, partition: Option<&str>, source: &AdmissionError) -> PyErr {
    let message = match partition {
        Some(p) => format!("partition {p:?}: {source}"),
        None => source.to_string(),
    };
    let built = (|| -> PyResult<PyErr> {
        let class = py.import("pygpukit.errors")?.getattr("AdmissionError")?;
        let err = class.call1((message.clone(),))?;
        err.setattr("partition", partition)?;
        if let AdmissionError::Short {
            resource,
            requested,
            available,
            ..
        } = source
        {
            err.setattr("resource", resource.to_string())?;
            err.setattr("requested", *requested)?;
            err.setattr("available", *available)?;
        }
        Ok(PyErr::from_value(err))
    })();
    built.unwrap_or_else(|_| PyRuntimeError::new_err(message))
}

/// Maps partition errors: refusals to `AdmissionError`, caller mistakes to
/// `ValueError`, unknown names to `KeyError`, busy partitions to `RuntimeError`.
fn partition_error(py: Python<'_>, e: PartitionError) -> PyErr {
    match &e {
        PartitionError::Admission {
            partition,
            source: source @ AdmissionError::Busy { .. },
        } => PyRuntimeError::new_err(format!("partition {partition:?}: {source}")),
        PartitionError::Admission { partition, source } => {
            admission_error(py, Some(partition), source)
        }
        PartitionError::UnknownPartition(_) => PyKeyError::new_err(e.to_string()),
        PartitionError::InvalidSpec(_) | PartitionError::DuplicateKey(_) => {
            PyValueError::new_err(e.to_string())
        }
    }
}

fn scheduler_error(py: Python<'_>, e: SchedulerError) -> PyErr {
    match e {
        SchedulerError::Partition(e) => partition_error(py, e),
        SchedulerError::UnknownTask(_) => PyKeyError::new_err(e.to_string()),
        SchedulerError::PartitionBusy { .. } | SchedulerError::Transition { .. } => {
            PyRuntimeError::new_err(e.to_string())
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a core call leaves consistent books (every mutation is
    // checked before it is made), so a poisoned lock is safe to keep using.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why creating or deleting a partition failed: the scheduler's books refused,
/// or the memory pool could not apply the partition's quota.
enum PooledError {
    Partition(PartitionError),
    Scheduler(SchedulerError),
    Pool(String),
}

impl PooledError {
    fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            PooledError::Partition(e) => partition_error(py, e),
            PooledError::Scheduler(e) => scheduler_error(py, e),
            PooledError::Pool(why) => PyRuntimeError::new_err(format!(
                "the memory pool could not set the partition's quota: {why}"
            )),
        }
    }
}

/// A number naming one `PartitionManager` or `SchedulerCore` to the runtime, whose
/// QoS capacity is the sum of the memory every live one gives its partitions.
fn new_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Admits a partition in `m` (of `owner`) under an id from the process's memory
/// runtime, which then charges allocations made inside the partition to it and
/// enforces its memory limit as a quota. The runtime is asked only once admission
/// is certain.
fn create_pooled(
    m: &mut core::PartitionManager,
    owner: u64,
    key: &str,
    name: &str,
    spec: PartitionSpec,
) -> Result<PyPartition, PooledError> {
    m.check_create(key, &spec).map_err(PooledError::Partition)?;
    let id = runtime()
        .create_partition(key, spec.memory_limit)
        .map_err(|e| PooledError::Pool(describe(&e)))?;
    let sms = m.config().total_sms;
    let total_memory = m.config().total_memory;
    let p = m
        .create_with_id(id, key, name, spec)
        .map_err(PooledError::Partition)?;
    enforce(p, owner, total_memory).map_err(PooledError::Pool)?;
    Ok(PyPartition::from_core(p, sms))
}

/// Hands an admitted partition to the enforcers: its class and request to the
/// memory pool (reservations held back from other governed partitions, reclaim
/// order; the owner's `total_memory` joins the capacity they share), its class and
/// pacing to the dispatch controller.
fn enforce(p: &core::Partition, owner: u64, total_memory: u64) -> Result<(), String> {
    let rt = runtime();
    rt.set_governor(owner, Some(total_memory))
        .and_then(|()| {
            rt.set_partition_qos(
                p.id,
                Some(PartitionQos {
                    class: p.qos,
                    request: p.spec.memory_request,
                    priority: p.spec.priority,
                }),
            )
        })
        .map_err(|e| describe(&e))?;
    rt.dispatch().set_pacing(p.id, Some((p.qos, p.pacing())))
}

/// Lifts the quota, QoS and pacing of a partition no longer enforced.
fn unpool(p: &core::Partition) -> Result<(), PooledError> {
    let rt = runtime();
    rt.dispatch()
        .set_pacing(p.id, None)
        .map_err(PooledError::Pool)?;
    rt.set_partition_qos(p.id, None)
        .and_then(|()| rt.set_partition_limit(p.id, None))
        .map_err(|e| PooledError::Pool(describe(&e)))
}

/// A deleted partition: enforcement lifted, and allocations still made inside it
/// refused by the pool (the runtime never reuses its id).
fn retire(p: &core::Partition) -> Result<(), PooledError> {
    unpool(p)?;
    runtime()
        .retire_partition(p.id)
        .map_err(|e| PooledError::Pool(describe(&e)))
}

/// When a manager is closed or goes away its partitions stop being enforced and its
/// memory leaves the capacity the pool's governed partitions share: their
/// reservations would otherwise be held back for nobody.
fn unpool_all(m: &core::PartitionManager, owner: u64) {
    for p in m.list().filter(|p| p.id != core::DEFAULT_PARTITION) {
        // Best effort: a failure here has no caller to report to.
        let _ = unpool(p);
    }
    let _ = runtime().set_governor(owner, None);
}

/// What a partition asks for, built by chaining:
/// `PartitionLimits().memory(4 << 30).compute(0.5)`. Each call returns a new object.
#[pyclass(
    module = "pygpukit._rust",
    name = "PartitionLimits",
    frozen,
    from_py_object
)]
#[derive(Clone)]
pub struct PyPartitionLimits {
    spec: PartitionSpec,
}

#[pymethods]
impl PyPartitionLimits {
    #[new]
    fn new() -> Self {
        PyPartitionLimits {
            spec: PartitionSpec::default(),
        }
    }

    /// Reserves `bytes` (an int or a size string like `"1GiB"`) and caps the partition
    /// there (request = limit).
    fn memory(&self, bytes: &Bound<'_, PyAny>) -> PyResult<Self> {
        let bytes = size_arg(bytes, "PartitionLimits.memory(bytes)")?;
        Ok(self.with(|s| {
            s.memory_request = bytes;
            s.memory_limit = Some(bytes);
        }))
    }

    /// Reserves `bytes` (an int or a size string) without changing the limit.
    fn memory_request(&self, bytes: &Bound<'_, PyAny>) -> PyResult<Self> {
        let bytes = size_arg(bytes, "PartitionLimits.memory_request(bytes)")?;
        Ok(self.with(|s| s.memory_request = bytes))
    }

    /// Caps the partition at `bytes` (an int or a size string; `None`: the device).
    #[pyo3(signature = (bytes))]
    fn memory_limit(&self, bytes: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let bytes = opt_size_arg(bytes, "PartitionLimits.memory_limit(bytes)")?;
        Ok(self.with(|s| s.memory_limit = bytes))
    }

    /// Reserves a fraction of the device's compute, in (0, 1].
    fn compute(&self, fraction: f64) -> PyResult<Self> {
        ComputeShare::Fraction(fraction).units(None).map_err(|e| {
            PyValueError::new_err(format!("PartitionLimits.compute(fraction): {e}"))
        })?;
        Ok(self.with(|s| s.compute = ComputeShare::Fraction(fraction)))
    }

    /// Reserves `count` SMs (the manager must know the device's SM count).
    fn sms(&self, count: i64) -> PyResult<Self> {
        let count = u32::try_from(count)
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "PartitionLimits.sms(count) must be a number of SMs >= 1, got {count}"
                ))
            })?;
        Ok(self.with(|s| s.compute = ComputeShare::Sms(count)))
    }

    /// Orders this partition's tasks within its QoS class; larger goes first.
    fn priority(&self, priority: i32) -> Self {
        self.with(|s| s.priority = priority)
    }

    /// Paces the partition's kernels to `rate` of device time with bursts of
    /// `burst_ms`, yielding to higher classes with pending work unless told not to.
    #[pyo3(signature = (rate, burst_ms = 20.0, yield_to_higher = true))]
    fn pacing(&self, rate: f64, burst_ms: f64, yield_to_higher: bool) -> PyResult<Self> {
        let config = PacingConfig {
            rate,
            burst_ns: (burst_ms * 1e6) as u64,
            yield_to_higher,
        };
        config.validate().map_err(|why| {
            PyValueError::new_err(format!("PartitionLimits.pacing(rate, burst_ms): {why}"))
        })?;
        Ok(self.with(|s| s.pacing = Some(config)))
    }

    /// The limits as a dict (bytes, fraction or SM count, priority, pacing).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("memory_request", self.spec.memory_request)?;
        d.set_item("memory_limit", self.spec.memory_limit)?;
        match self.spec.compute {
            ComputeShare::None => d.set_item("compute", py.None())?,
            ComputeShare::Fraction(f) => d.set_item("compute", f)?,
            ComputeShare::Sms(n) => d.set_item("sms", n)?,
        }
        d.set_item("priority", self.spec.priority)?;
        d.set_item("pacing", self.spec.pacing.map(|p| pacing_tuple(&p)))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        // The chain that rebuilds these limits.
        let s = &self.spec;
        let mut out = "PartitionLimits()".to_owned();
        if s.memory_request > 0 {
            out += &format!(".memory_request({})", s.memory_request);
        }
        if let Some(limit) = s.memory_limit {
            out += &format!(".memory_limit({limit})");
        }
        match s.compute {
            ComputeShare::None => {}
            ComputeShare::Fraction(f) => out += &format!(".compute({f})"),
            ComputeShare::Sms(n) => out += &format!(".sms({n})"),
        }
        if s.priority != 0 {
            out += &format!(".priority({})", s.priority);
        }
        if let Some(p) = s.pacing {
            let yield_to_higher = if p.yield_to_higher { "True" } else { "False" };
            out += &format!(
                ".pacing({}, burst_ms={}, yield_to_higher={yield_to_higher})",
                p.rate,
                p.burst_ns as f64 / 1e6
            );
        }
        out
    }
}

impl PyPartitionLimits {
    fn with(&self, f: impl FnOnce(&mut PartitionSpec)) -> Self {
        let mut spec = self.spec.clone();
        f(&mut spec);
        PyPartitionLimits { spec }
    }
}

/// A device's SM count as given to `name`: `None`, or a number >= 1.
fn sm_count(count: Option<i64>, name: &str) -> PyResult<Option<u32>> {
    count
        .map(|c| {
            u32::try_from(c).ok().filter(|&c| c > 0).ok_or_else(|| {
                PyValueError::new_err(format!("{name} must be an SM count >= 1 or None, got {c}"))
            })
        })
        .transpose()
}

/// A task's share of the device's bandwidth, given to `name`: a finite number >= 0.
fn bandwidth_arg(bandwidth: f64, name: &str) -> PyResult<f64> {
    if bandwidth.is_finite() && bandwidth >= 0.0 {
        Ok(bandwidth)
    } else {
        Err(PyValueError::new_err(format!(
            "{name} must be a finite share of the device's bandwidth >= 0, got {bandwidth}"
        )))
    }
}

fn pacing_tuple(p: &PacingConfig) -> (f64, f64, bool) {
    (p.rate, p.burst_ns as f64 / 1e6, p.yield_to_higher)
}

/// The device a `PartitionManager` divides: memory in bytes, SM count if known.
#[pyclass(
    module = "pygpukit._rust",
    name = "PartitionConfig",
    frozen,
    from_py_object
)]
#[derive(Clone)]
pub struct PyPartitionConfig {
    #[pyo3(get)]
    total_memory: u64,
    #[pyo3(get)]
    total_sms: Option<u32>,
}

#[pymethods]
impl PyPartitionConfig {
    #[new]
    #[pyo3(signature = (total_memory, total_sms = None))]
    fn new(total_memory: &Bound<'_, PyAny>, total_sms: Option<i64>) -> PyResult<Self> {
        Ok(PyPartitionConfig {
            total_memory: size_arg(total_memory, "PartitionConfig(total_memory)")?,
            total_sms: sm_count(total_sms, "PartitionConfig(total_sms)")?,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "PartitionConfig(total_memory={}, total_sms={})",
            self.total_memory,
            crate::pyfmt::opt(self.total_sms)
        )
    }
}

impl PyPartitionConfig {
    fn core(&self) -> core::PartitionConfig {
        core::PartitionConfig {
            total_memory: self.total_memory,
            total_sms: self.total_sms,
        }
    }
}

/// An admitted partition, as it was when returned (a snapshot, not a live view).
#[pyclass(module = "pygpukit._rust", name = "Partition", frozen)]
pub struct PyPartition {
    /// The key it was created with (`"inference"`).
    #[pyo3(get)]
    id: String,
    #[pyo3(get)]
    name: String,
    /// The number the memory pool charges (`_rust.set_current_partition`).
    #[pyo3(get)]
    numeric_id: u64,
    /// `"guaranteed"`, `"burstable"` or `"best_effort"`.
    #[pyo3(get)]
    qos_class: &'static str,
    #[pyo3(get)]
    memory_request: u64,
    #[pyo3(get)]
    memory_limit: Option<u64>,
    /// Reserved compute as a fraction of the device (0.0 when none).
    #[pyo3(get)]
    compute: f64,
    /// Reserved SMs, when the device's SM count is known.
    #[pyo3(get)]
    sms: Option<u32>,
    #[pyo3(get)]
    priority: i32,
    /// `(rate, burst_ms, yield_to_higher)` in force.
    #[pyo3(get)]
    pacing: (f64, f64, bool),
}

impl PyPartition {
    fn from_core(p: &core::Partition, total_sms: Option<u32>) -> Self {
        PyPartition {
            id: p.key.clone(),
            name: p.name.clone(),
            numeric_id: p.id,
            qos_class: p.qos.as_str(),
            memory_request: p.spec.memory_request,
            memory_limit: p.spec.memory_limit,
            compute: p.compute_units as f64 / WHOLE_DEVICE as f64,
            sms: total_sms.and_then(|n| p.sms(n)),
            priority: p.spec.priority,
            pacing: pacing_tuple(&p.pacing()),
        }
    }
}

#[pymethods]
impl PyPartition {
    fn __repr__(&self) -> String {
        format!(
            "Partition(id={:?}, name={:?}, qos_class={:?}, memory_request={}, memory_limit={}, \
             compute={})",
            self.id,
            self.name,
            self.qos_class,
            self.memory_request,
            crate::pyfmt::opt(self.memory_limit),
            self.compute
        )
    }
}

/// Creates, finds and deletes partitions of one device, with admission control.
#[pyclass(module = "pygpukit._rust", name = "PartitionManager", frozen)]
pub struct PyPartitionManager {
    inner: Mutex<core::PartitionManager>,
    owner: u64,
}

impl Drop for PyPartitionManager {
    fn drop(&mut self) {
        unpool_all(&lock(&self.inner), self.owner);
    }
}

#[pymethods]
impl PyPartitionManager {
    #[new]
    fn new(config: PyPartitionConfig) -> Self {
        PyPartitionManager {
            inner: Mutex::new(core::PartitionManager::new(config.core())),
            owner: new_owner(),
        }
    }

    /// Admits a partition; raises `AdmissionError` saying what is short.
    fn create_partition(
        &self,
        py: Python<'_>,
        id: &str,
        name: &str,
        limits: PyPartitionLimits,
    ) -> PyResult<PyPartition> {
        let result = create_pooled(&mut lock(&self.inner), self.owner, id, name, limits.spec);
        result.map_err(|e| e.into_py(py))
    }

    /// Stops enforcing every partition (quota, reservation, pacing).
    fn end_enforcement(&self) {
        unpool_all(&lock(&self.inner), self.owner);
    }

    /// Deletes a partition, giving its reservation back.
    fn delete_partition(&self, py: Python<'_>, id: &str) -> PyResult<PyPartition> {
        let result = {
            let mut m = lock(&self.inner);
            let sms = m.config().total_sms;
            m.delete(id).map_err(PooledError::Partition).and_then(|p| {
                retire(&p)?;
                Ok(PyPartition::from_core(&p, sms))
            })
        };
        result.map_err(|e| e.into_py(py))
    }

    /// The partition `id`, or `None`.
    fn get_partition(&self, id: &str) -> Option<PyPartition> {
        let m = lock(&self.inner);
        m.get(id)
            .map(|p| PyPartition::from_core(p, m.config().total_sms))
    }

    /// Every partition, the always-present `"default"` first.
    fn list_partitions(&self) -> Vec<PyPartition> {
        let m = lock(&self.inner);
        m.list()
            .map(|p| PyPartition::from_core(p, m.config().total_sms))
            .collect()
    }

    /// Unreserved memory in bytes.
    #[getter]
    fn available_memory(&self) -> u64 {
        let m = lock(&self.inner);
        m.config().total_memory - m.committed().memory
    }

    /// Unreserved compute as a fraction of the device.
    #[getter]
    fn available_compute(&self) -> f64 {
        (WHOLE_DEVICE - lock(&self.inner).committed().compute) as f64 / WHOLE_DEVICE as f64
    }
}

/// A task as `QosPolicyEvaluator` sees it; made with `guaranteed`, `burstable`
/// or `best_effort`.
#[pyclass(
    module = "pygpukit._rust",
    name = "QosTaskMeta",
    frozen,
    from_py_object
)]
#[derive(Clone)]
pub struct PyQosTaskMeta {
    inner: core::QosTaskMeta,
}

#[pymethods]
impl PyQosTaskMeta {
    /// Reserves `memory` bytes (request = limit) and `bandwidth`.
    #[staticmethod]
    #[pyo3(signature = (id, name, memory, bandwidth = 0.0))]
    fn guaranteed(
        id: &str,
        name: &str,
        memory: &Bound<'_, PyAny>,
        bandwidth: f64,
    ) -> PyResult<Self> {
        let memory = size_arg(memory, "QosTaskMeta.guaranteed(memory)")?;
        let bandwidth = bandwidth_arg(bandwidth, "QosTaskMeta.guaranteed(bandwidth)")?;
        Ok(PyQosTaskMeta {
            inner: core::QosTaskMeta::guaranteed(id, name, memory, bandwidth),
        })
    }

    /// Reserves `memory_request`, may grow to `memory_limit` (`None`: the device).
    #[staticmethod]
    #[pyo3(signature = (id, name, memory_request, memory_limit = None, bandwidth = 0.0))]
    fn burstable(
        id: &str,
        name: &str,
        memory_request: &Bound<'_, PyAny>,
        memory_limit: Option<&Bound<'_, PyAny>>,
        bandwidth: f64,
    ) -> PyResult<Self> {
        let memory_request = size_arg(memory_request, "QosTaskMeta.burstable(memory_request)")?;
        let memory_limit = opt_size_arg(memory_limit, "QosTaskMeta.burstable(memory_limit)")?;
        let bandwidth = bandwidth_arg(bandwidth, "QosTaskMeta.burstable(bandwidth)")?;
        Ok(PyQosTaskMeta {
            inner: core::QosTaskMeta::burstable(id, name, memory_request, memory_limit, bandwidth),
        })
    }

    /// Reserves nothing.
    #[staticmethod]
    fn best_effort(id: &str, name: &str) -> Self {
        PyQosTaskMeta {
            inner: core::QosTaskMeta::best_effort(id, name),
        }
    }

    #[getter]
    fn id(&self) -> &str {
        &self.inner.id
    }

    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    #[getter]
    fn qos_class(&self) -> &'static str {
        self.inner.class.as_str()
    }

    #[getter]
    fn memory_request(&self) -> u64 {
        self.inner.memory_request
    }

    #[getter]
    fn memory_limit(&self) -> Option<u64> {
        self.inner.memory_limit
    }

    #[getter]
    fn bandwidth(&self) -> f64 {
        self.inner.bandwidth
    }

    fn __repr__(&self) -> String {
        format!(
            "QosTaskMeta({:?}, {:?}, qos_class={:?}, memory_request={}, memory_limit={}, \
             bandwidth={})",
            self.inner.id,
            self.inner.name,
            self.inner.class.as_str(),
            self.inner.memory_request,
            py_opt(self.inner.memory_limit),
            self.inner.bandwidth
        )
    }
}

/// The evaluator's answer; true when admitted.
#[pyclass(module = "pygpukit._rust", name = "QosDecision", frozen)]
pub struct PyQosDecision {
    #[pyo3(get)]
    admitted: bool,
    #[pyo3(get)]
    qos_class: &'static str,
    #[pyo3(get)]
    reserved_memory: u64,
    #[pyo3(get)]
    reserved_bandwidth: f64,
    /// What was reserved, or what is short and what to do.
    #[pyo3(get)]
    reason: String,
}

impl From<core::QosDecision> for PyQosDecision {
    fn from(d: core::QosDecision) -> Self {
        PyQosDecision {
            admitted: d.admitted,
            qos_class: d.class.as_str(),
            reserved_memory: d.reserved_memory,
            reserved_bandwidth: d.reserved_bandwidth,
            reason: d.reason,
        }
    }
}

#[pymethods]
impl PyQosDecision {
    fn __bool__(&self) -> bool {
        self.admitted
    }

    fn __repr__(&self) -> String {
        let admitted = if self.admitted { "True" } else { "False" };
        format!("QosDecision(admitted={admitted}, reason={:?})", self.reason)
    }
}

/// Admits tasks by QoS class against a device's memory and bandwidth.
#[pyclass(module = "pygpukit._rust", name = "QosPolicyEvaluator", frozen)]
pub struct PyQosPolicyEvaluator {
    inner: Mutex<core::QosPolicyEvaluator>,
}

#[pymethods]
impl PyQosPolicyEvaluator {
    #[new]
    #[pyo3(signature = (total_memory, total_bandwidth = 1.0))]
    fn new(total_memory: &Bound<'_, PyAny>, total_bandwidth: f64) -> PyResult<Self> {
        let total_memory = size_arg(total_memory, "QosPolicyEvaluator(total_memory)")?;
        let inner = core::QosPolicyEvaluator::new(total_memory, total_bandwidth)
            .map_err(PyValueError::new_err)?;
        Ok(PyQosPolicyEvaluator {
            inner: Mutex::new(inner),
        })
    }

    /// Would `task` be admitted now? Reserves nothing.
    fn evaluate(&self, task: &PyQosTaskMeta) -> PyQosDecision {
        lock(&self.inner).evaluate(&task.inner).into()
    }

    /// Evaluates `task` and, if admitted, reserves its resources until `release`.
    fn admit(&self, task: &PyQosTaskMeta) -> PyQosDecision {
        lock(&self.inner).admit(&task.inner).into()
    }

    /// Gives back an admitted task's reservation.
    fn release(&self, task_id: &str) -> PyResult<()> {
        let result = lock(&self.inner).release(task_id);
        result.map_err(PyKeyError::new_err)
    }

    #[getter]
    fn available_memory(&self) -> u64 {
        lock(&self.inner).available_memory()
    }

    #[getter]
    fn available_bandwidth(&self) -> f64 {
        lock(&self.inner).available_bandwidth()
    }

    /// Ids of the admitted tasks, sorted.
    fn admitted_tasks(&self) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.inner).admitted().map(str::to_owned).collect();
        ids.sort();
        ids
    }
}

/// The run queue and task state machine behind `pygpukit.scheduler`. Times are
/// seconds since the core was created (its own monotonic clock).
#[pyclass(module = "pygpukit._rust", name = "SchedulerCore", frozen)]
pub struct PySchedulerCore {
    inner: Mutex<core::Scheduler>,
    epoch: Instant,
    owner: u64,
}

impl Drop for PySchedulerCore {
    fn drop(&mut self) {
        unpool_all(lock(&self.inner).partitions(), self.owner);
    }
}

impl PySchedulerCore {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn run<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut core::Scheduler, u64) -> Result<T, SchedulerError>,
    ) -> PyResult<T> {
        let now = self.now();
        let result = f(&mut lock(&self.inner), now);
        result.map_err(|e| scheduler_error(py, e))
    }
}

/// `None` or the number, as Python writes it.
fn py_opt(v: Option<u64>) -> String {
    v.map_or_else(|| "None".to_owned(), |v| v.to_string())
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[pymethods]
impl PySchedulerCore {
    #[new]
    #[pyo3(signature = (total_memory, total_sms = None))]
    fn new(total_memory: &Bound<'_, PyAny>, total_sms: Option<i64>) -> PyResult<Self> {
        let config = core::PartitionConfig {
            total_memory: size_arg(total_memory, "Scheduler(total_memory)")?,
            total_sms: sm_count(total_sms, "Scheduler(total_sms)")?,
        };
        Ok(PySchedulerCore {
            inner: Mutex::new(core::Scheduler::new(core::PartitionManager::new(config))),
            epoch: Instant::now(),
            owner: new_owner(),
        })
    }

    /// Admits a partition; raises `AdmissionError` saying what is short.
    fn create_partition(
        &self,
        py: Python<'_>,
        id: &str,
        name: &str,
        limits: PyPartitionLimits,
    ) -> PyResult<PyPartition> {
        let result = create_pooled(
            lock(&self.inner).partitions_mut(),
            self.owner,
            id,
            name,
            limits.spec,
        );
        result.map_err(|e| e.into_py(py))
    }

    /// Stops enforcing every partition (quota, reservation, pacing): the
    /// scheduler is shut down. Its books stay readable.
    fn end_enforcement(&self) {
        unpool_all(lock(&self.inner).partitions(), self.owner);
    }

    /// Deletes a partition with no unfinished tasks.
    fn delete_partition(&self, py: Python<'_>, id: &str) -> PyResult<PyPartition> {
        let result = {
            let mut s = lock(&self.inner);
            let sms = s.partitions().config().total_sms;
            s.delete_partition(id)
                .map_err(PooledError::Scheduler)
                .and_then(|p| {
                    retire(&p)?;
                    Ok(PyPartition::from_core(&p, sms))
                })
        };
        result.map_err(|e| e.into_py(py))
    }

    /// The partition `id`, or `None`.
    fn get_partition(&self, id: &str) -> Option<PyPartition> {
        let s = lock(&self.inner);
        let sms = s.partitions().config().total_sms;
        s.partitions()
            .get(id)
            .map(|p| PyPartition::from_core(p, sms))
    }

    /// Queues a task as pending; returns its id. Raises `AdmissionError` when it
    /// could never fit, `KeyError` for an unknown partition.
    #[pyo3(signature = (name, partition = None, priority = 0, memory = None, timeout = None))]
    fn submit(
        &self,
        py: Python<'_>,
        name: String,
        partition: Option<String>,
        priority: i32,
        memory: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let memory = opt_size_arg(memory, "submit(memory)")?.unwrap_or(0);
        if let Some(t) = timeout {
            if !(t >= 0.0 && t.is_finite()) {
                return Err(PyValueError::new_err(format!(
                    "a deadline is seconds from now and must be a finite number >= 0, got {t}"
                )));
            }
        }
        self.run(py, |s, now| {
            let deadline = timeout.map(|t| now.saturating_add((t * 1e9) as u64));
            s.submit(
                TaskRequest {
                    name,
                    partition,
                    priority,
                    memory,
                    deadline,
                },
                now,
            )
        })
    }

    /// Times out tasks whose deadline passed before they started, then admits
    /// the next task to run: `(task id or None, ids of the tasks timed out)`.
    fn dispatch(&self, py: Python<'_>) -> PyResult<(Option<u64>, Vec<u64>)> {
        self.run(py, |s, now| {
            let expired = s.expire(now)?;
            Ok((s.dispatch(now)?, expired))
        })
    }

    /// Seconds until the earliest deadline of a task not yet started (`None`: none).
    fn next_deadline(&self) -> Option<f64> {
        let now = self.now();
        let s = lock(&self.inner);
        s.tasks()
            .filter(|t| {
                matches!(
                    t.state(),
                    core::TaskState::Pending | core::TaskState::Admitted
                )
            })
            .filter_map(|t| t.deadline)
            .min()
            .map(|d| seconds(d.saturating_sub(now)))
    }

    /// An admitted task starts running.
    fn start(&self, py: Python<'_>, task: u64) -> PyResult<()> {
        self.run(py, |s, now| s.start(task, now))
    }

    /// A running task ended: `outcome` is `"completed"`, `"failed"` or `"timed_out"`.
    fn finish(&self, py: Python<'_>, task: u64, outcome: &str) -> PyResult<()> {
        let outcome = match outcome {
            "completed" => Outcome::Completed,
            "failed" => Outcome::Failed,
            "timed_out" => Outcome::TimedOut,
            other => {
                return Err(PyValueError::new_err(format!(
                    "outcome must be 'completed', 'failed' or 'timed_out', got {other:?}"
                )))
            }
        };
        self.run(py, |s, now| s.finish(task, outcome, now))
    }

    /// Cancels a task that has not started; `RuntimeError` if it has.
    fn cancel(&self, py: Python<'_>, task: u64) -> PyResult<()> {
        self.run(py, |s, now| s.cancel(task, now))
    }

    /// The task's state name (`"pending"`, ..., `"timed_out"`).
    fn state(&self, py: Python<'_>, task: u64) -> PyResult<&'static str> {
        self.run(py, |s, _| {
            s.task(task)
                .map(|t| t.state().as_str())
                .ok_or(SchedulerError::UnknownTask(task))
        })
    }

    /// Drops finished tasks from the books; returns how many.
    fn forget_finished(&self) -> usize {
        lock(&self.inner).forget_finished()
    }

    /// Partitions (with held memory and task counts), tasks (with their state
    /// history) and device totals, as plain dicts and lists.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = lock(&self.inner).clone();
        let m = s.partitions();
        let config = m.config();
        let partitions = PyList::empty(py);
        for p in m.list() {
            let d = PyDict::new(py);
            let view = PyPartition::from_core(p, config.total_sms);
            let (pending, admitted, running) = s.counts(p.id);
            d.set_item("id", view.id)?;
            d.set_item("name", view.name)?;
            d.set_item("numeric_id", view.numeric_id)?;
            d.set_item("qos_class", view.qos_class)?;
            d.set_item("memory_request", view.memory_request)?;
            d.set_item("memory_limit", view.memory_limit)?;
            d.set_item("memory_held", m.held(p.id).memory)?;
            d.set_item("compute", view.compute)?;
            d.set_item("sms", view.sms)?;
            d.set_item("priority", view.priority)?;
            d.set_item("pacing", view.pacing)?;
            d.set_item("pending", pending)?;
            d.set_item("admitted", admitted)?;
            d.set_item("running", running)?;
            partitions.append(d)?;
        }
        let tasks = PyList::empty(py);
        for t in s.tasks() {
            let d = PyDict::new(py);
            d.set_item("id", t.id)?;
            d.set_item("name", &t.name)?;
            d.set_item(
                "partition",
                m.get_by_id(t.partition).map(|p| p.key.as_str()),
            )?;
            d.set_item("priority", t.priority)?;
            d.set_item("memory", t.memory)?;
            d.set_item("state", t.state().as_str())?;
            d.set_item("submitted_at", seconds(t.submitted_at))?;
            d.set_item("deadline", t.deadline.map(seconds))?;
            let history: Vec<(&str, f64)> = t
                .history()
                .iter()
                .map(|(st, at)| (st.as_str(), seconds(*at)))
                .collect();
            d.set_item("history", history)?;
            tasks.append(d)?;
        }
        let out = PyDict::new(py);
        out.set_item("total_memory", config.total_memory)?;
        out.set_item("total_sms", config.total_sms)?;
        out.set_item("reserved_memory", m.reserved().memory)?;
        out.set_item("committed_memory", m.committed().memory)?;
        out.set_item(
            "reserved_compute",
            m.reserved().compute as f64 / WHOLE_DEVICE as f64,
        )?;
        out.set_item("partitions", partitions)?;
        out.set_item("tasks", tasks)?;
        Ok(out)
    }
}

/// Kernel pacing as the dispatch controller enforces it: `active` (whether any
/// launch can be held now) and, per registered partition id, its class, config
/// and counters (`launched`, `held`, `held_ms`, `forced`, `measured_ms`, `pending`).
#[pyfunction]
fn pacing_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = runtime().dispatch();
    let (active, stats) = (d.pacing_active(), d.pacing_stats());
    let partitions = PyDict::new(py);
    for st in stats {
        let e = PyDict::new(py);
        e.set_item("qos_class", st.class.map(|c| c.as_str()))?;
        if let Some((rate, burst_ns, yield_to_higher)) = st.config {
            e.set_item("rate", rate)?;
            e.set_item("burst_ms", burst_ns as f64 / 1e6)?;
            e.set_item("yield_to_higher", yield_to_higher)?;
        }
        e.set_item("launched", st.launched)?;
        e.set_item("held", st.held)?;
        e.set_item("held_ms", st.held_ns as f64 / 1e6)?;
        e.set_item("forced", st.forced)?;
        e.set_item("measured_ms", st.measured_ns as f64 / 1e6)?;
        e.set_item("pending", st.pending)?;
        partitions.set_item(st.partition, e)?;
    }
    let out = PyDict::new(py);
    out.set_item("active", active)?;
    out.set_item("partitions", partitions)?;
    Ok(out)
}

/// The most one launch may be held by pacing, in seconds (a higher-class launch
/// that waits on lower-class work must not stall the process).
#[pyfunction]
fn set_pacing_max_hold(seconds: f64) -> PyResult<()> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(PyValueError::new_err(format!(
            "max_hold must be a positive number of seconds, got {seconds}"
        )));
    }
    runtime()
        .dispatch()
        .set_max_hold(std::time::Duration::from_secs_f64(seconds));
    Ok(())
}

/// Adds the scheduler's classes and functions to `pygpukit._rust`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pacing_stats, m)?)?;
    m.add_function(wrap_pyfunction!(set_pacing_max_hold, m)?)?;
    m.add_class::<PyPartitionLimits>()?;
    m.add_class::<PyPartitionConfig>()?;
    m.add_class::<PyPartition>()?;
    m.add_class::<PyPartitionManager>()?;
    m.add_class::<PyQosTaskMeta>()?;
    m.add_class::<PyQosDecision>()?;
    m.add_class::<PyQosPolicyEvaluator>()?;
    m.add_class::<PySchedulerCore>()?;
    Ok(())
}
