//! PyGPUkit's memory and scheduling core.
//!
//! Pure Rust: no Python and no CUDA. The device is reached only through the
//! `DeviceBackend` trait, which the C++ core implements over the CUDA driver and
//! which tests implement with a fake.
