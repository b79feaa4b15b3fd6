//! Sizes in bytes as the memory and scheduler APIs take them: a non-negative int, or a
//! string in the forms `PYGPUKIT_MEMORY_LIMIT` and `gp.memory.set_limit` read (`"1GiB"`,
//! `"512 MiB"`, `"2GB"`, `"1073741824"`), parsed by the one parser in
//! `pygpukit_core::limits`. Every error names the argument.

use pygpukit_core::limits::{parse_limit, LimitSpec};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString};

fn expected(name: &str) -> String {
    format!("{name} must be a size in bytes: an int >= 0 or a string like '1GiB'")
}

/// The size given to the argument `name`; `TypeError`/`ValueError` naming it otherwise.
pub fn size_arg(value: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{}, not a bool",
            expected(name)
        )));
    }
    if value.is_instance_of::<PyString>() {
        let text: String = value.extract()?;
        return match parse_limit(&text) {
            Ok(LimitSpec::Bytes(b)) => Ok(b),
            Ok(LimitSpec::Fraction(_)) => Err(PyValueError::new_err(format!(
                "{}, got {text:?} (a fraction of the device is not a size here)",
                expected(name)
            ))),
            Err(why) => Err(PyValueError::new_err(format!("{}: {why}", expected(name)))),
        };
    }
    if let Ok(bytes) = value.extract::<i128>() {
        return u64::try_from(bytes)
            .map_err(|_| PyValueError::new_err(format!("{}, got {bytes}", expected(name))));
    }
    let type_name = value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string());
    Err(PyTypeError::new_err(format!(
        "{}, got {type_name}",
        expected(name)
    )))
}

/// [`size_arg`] for an optional size: `None` stays `None`.
pub fn opt_size_arg(value: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<u64>> {
    match value {
        Some(v) if !v.is_none() => size_arg(v, name).map(Some),
        _ => Ok(None),
    }
}

/// `parse_size(value, name="size")`: the bytes of a size argument, for the Python modules
/// that take sizes (`Scheduler(total_memory=...)`, `MemoryPool(quota=...)`, ...).
#[pyfunction]
#[pyo3(signature = (value, name = "size"))]
pub fn parse_size(value: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    size_arg(value, name)
}
