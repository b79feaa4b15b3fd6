//! The one process-wide [`Runtime`] shared by the C API and the Python functions.

use pygpukit_core::runtime::Runtime;
use std::sync::OnceLock;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

pub fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(Runtime::new)
}
