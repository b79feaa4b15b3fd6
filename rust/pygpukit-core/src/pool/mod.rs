//! The caching device pool: size classes, best fit with split and merge,
//! stream-ordered reuse, LRU release, graph-private regions.

mod arena;
mod device_pool;
pub mod size_class;
mod stream_order;

pub use arena::GraphPoolId;
pub use device_pool::{
    AllocError, AllocErrorKind, AllocOptions, BlockRef, DevicePool, PoolError, ID_BITS,
};

#[cfg(test)]
mod tests;
