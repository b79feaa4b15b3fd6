//! Rounding of requests and sizing of segments.
//!
//! Requests are rounded up to [`ROUND`] bytes. Small requests (at most
//! [`SMALL_MAX`]) are packed into [`SMALL_SEGMENT`] segments; larger ones get
//! segments rounded up to a multiple of [`LARGE_ROUND`]. Small and large blocks
//! never share a segment, so long-lived small blocks cannot pin large segments.

pub const ROUND: u64 = 512;
pub const SMALL_MAX: u64 = 1 << 20;
pub const SMALL_SEGMENT: u64 = 2 << 20;
pub const LARGE_ROUND: u64 = 2 << 20;

/// Which family of segments a block comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SizeKind {
    Small,
    Large,
}

/// The block size handed out for a request of `nbytes` (0 gets the minimum, so ids stay unique).
pub fn round_request(nbytes: u64) -> u64 {
    nbytes.max(1).div_ceil(ROUND) * ROUND
}

pub fn kind_of(size: u64) -> SizeKind {
    if size <= SMALL_MAX {
        SizeKind::Small
    } else {
        SizeKind::Large
    }
}

/// Smallest remainder worth splitting off a free block; smaller tails stay with the block.
pub fn min_split(kind: SizeKind) -> u64 {
    match kind {
        SizeKind::Small => ROUND,
        SizeKind::Large => SMALL_MAX,
    }
}

/// The segment to request from the backend for a block of `size` bytes when at
/// most `room` more bytes may be reserved: the natural segment, shrunk to fit
/// the room but never below the block itself.
pub fn segment_size(size: u64, room: u64) -> u64 {
    let natural = match kind_of(size) {
        SizeKind::Small => SMALL_SEGMENT,
        SizeKind::Large => size.div_ceil(LARGE_ROUND) * LARGE_ROUND,
    };
    natural.min(room / ROUND * ROUND).max(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_and_classifies() {
        assert_eq!(round_request(0), ROUND);
        assert_eq!(round_request(513), 1024);
        assert_eq!(kind_of(SMALL_MAX), SizeKind::Small);
        assert_eq!(kind_of(SMALL_MAX + ROUND), SizeKind::Large);
    }

    #[test]
    fn segments_are_natural_unless_the_room_is_short() {
        assert_eq!(segment_size(4096, u64::MAX), SMALL_SEGMENT);
        assert_eq!(segment_size(3 << 20, u64::MAX), 4 << 20);
        assert_eq!(segment_size(3 << 20, 3 << 20), 3 << 20);
        assert_eq!(segment_size(4096, 10_000), 9728);
        assert_eq!(
            segment_size(4096, 0),
            4096,
            "never below the block: the caller checks the room"
        );
    }
}
