//! PyGPUkit's memory and scheduling core.
//!
//! Pure Rust: no Python and no CUDA. The device is reached only through the
//! [`backend::DeviceBackend`] trait, which the C++ core implements over the CUDA
//! driver, [`host_backend::HostBackend`] implements over host memory (the CPU
//! backend), and [`fake_backend::FakeBackend`] implements for tests.

pub mod backend;
pub mod dispatch;
pub mod download;
pub mod events;
pub mod evict;
pub mod fake_backend;
pub mod host_backend;
pub mod limits;
pub mod pinned;
pub mod pool;
pub mod pull_ring;
pub mod runtime;
pub mod scheduler;
pub mod stats;
pub mod transfer;
pub mod upload;
