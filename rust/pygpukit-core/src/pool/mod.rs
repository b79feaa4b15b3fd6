//! The caching device pool: size classes, best fit with split and merge,
//! stream-ordered reuse, LRU release, graph-private regions.

mod arena;
mod device_pool;
#[cfg(test)]
mod qos_tests;
pub mod size_class;
mod stream_order;

pub use arena::GraphPoolId;
pub use device_pool::{
    AllocError, AllocErrorKind, AllocOptions, BlockRef, DevicePool, PartitionQos, PoolError,
    ID_BITS,
};

/// The pool's maps are keyed by ids, stream handles and small enums that no
/// caller chooses adversarially, and one alloc + free does about ten lookups:
/// a multiply-rotate hash (FxHash's) instead of SipHash takes ~100 ns off each
/// cycle of a ~250 ns pool path.
#[derive(Clone, Copy, Default)]
pub(crate) struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write_i32(&mut self, v: i32) {
        self.write_u64(u64::from(v as u32));
    }
}

pub(crate) type FastMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests;
