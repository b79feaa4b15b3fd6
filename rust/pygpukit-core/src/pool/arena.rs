//! Segments and the ranges they are split into: best fit, split and merge.
//!
//! Pure bookkeeping over addresses; nothing here calls the backend.
//!
//! Invariants:
//! - the ranges of a segment tile it exactly (no gap, no overlap);
//! - two neighbouring free ranges are never both [`Owner::Cleared`] or owned by the
//!   same stream (they would have been merged);
//! - every free range is in exactly one free list, the one of its
//!   `(graph, kind, owner)`; used ranges are in none.

use super::size_class::{min_split, SizeKind};
use super::FastMap;
use crate::backend::Stream;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// Identifier of a graph-private region.
pub type GraphPoolId = u64;

/// Who may reuse a free range without synchronizing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Freed on this stream; work enqueued there before the free may still use it.
    Stream(Stream),
    /// No pending work uses it: any stream may take it.
    Cleared,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct ListKey {
    graph: Option<GraphPoolId>,
    kind: SizeKind,
    owner: Owner,
}

/// One allocation obtained from the backend.
#[derive(Clone, Debug)]
pub struct Segment {
    pub size: u64,
    pub kind: SizeKind,
    pub graph: Option<GraphPoolId>,
    pub used_ranges: u32,
    /// Pool clock at the segment's last allocation or free: for LRU release.
    pub last_used: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RangeState {
    Used(u64),
    /// `seq` orders frees on the owning stream (see `stream_order`).
    Free {
        owner: Owner,
        seq: u64,
        since: Instant,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct Range {
    pub size: u64,
    pub segment: u64,
    pub state: RangeState,
}

/// See the module documentation.
#[derive(Default)]
pub struct Arena {
    segments: BTreeMap<u64, Segment>,
    ranges: BTreeMap<u64, Range>,
    free: FastMap<ListKey, BTreeSet<(u64, u64)>>,
}

/// Free neighbours merge only when they have the same owner: merging a cleared
/// range into a pending one would hide cleared bytes from other streams.
fn merged_owner(a: (Owner, u64), b: (Owner, u64)) -> Option<(Owner, u64)> {
    (a.0 == b.0).then_some((a.0, a.1.max(b.1)))
}

impl Arena {
    pub fn segments(&self) -> impl Iterator<Item = (u64, &Segment)> {
        self.segments.iter().map(|(b, s)| (*b, s))
    }

    pub fn ranges(&self) -> impl Iterator<Item = (u64, &Range)> {
        self.ranges.iter().map(|(p, r)| (*p, r))
    }

    fn key(&self, range: &Range) -> Option<ListKey> {
        let seg = &self.segments[&range.segment];
        match range.state {
            RangeState::Free { owner, .. } => Some(ListKey {
                graph: seg.graph,
                kind: seg.kind,
                owner,
            }),
            RangeState::Used(_) => None,
        }
    }

    fn list_insert(&mut self, ptr: u64) {
        let r = self.ranges[&ptr];
        if let Some(k) = self.key(&r) {
            self.free.entry(k).or_default().insert((r.size, ptr));
        }
    }

    fn list_remove(&mut self, ptr: u64) {
        let r = self.ranges[&ptr];
        if let Some(k) = self.key(&r) {
            let list = self
                .free
                .get_mut(&k)
                .expect("free range missing from its list");
            assert!(
                list.remove(&(r.size, ptr)),
                "free range missing from its list"
            );
        }
    }

    /// Adds a fresh segment as one free, cleared range.
    pub fn add_segment(
        &mut self,
        base: u64,
        size: u64,
        kind: SizeKind,
        graph: Option<GraphPoolId>,
        now: u64,
    ) {
        self.segments.insert(
            base,
            Segment {
                size,
                kind,
                graph,
                used_ranges: 0,
                last_used: now,
            },
        );
        let state = RangeState::Free {
            owner: Owner::Cleared,
            seq: 0,
            since: Instant::now(),
        };
        self.ranges.insert(
            base,
            Range {
                size,
                segment: base,
                state,
            },
        );
        self.list_insert(base);
    }

    /// The smallest free range of at least `size` bytes in the given list.
    pub fn best_fit(
        &self,
        graph: Option<GraphPoolId>,
        kind: SizeKind,
        owner: Owner,
        size: u64,
    ) -> Option<u64> {
        let list = self.free.get(&ListKey { graph, kind, owner })?;
        list.range((size, 0)..).next().map(|&(_, ptr)| ptr)
    }

    /// Marks the free range at `ptr` used by `block`, splitting off a tail worth keeping
    /// (with `exact`, any tail: the block's owner is charged exactly `size`, e.g. a
    /// partition under a quota, which a kept tail could push over it).
    /// Returns the size handed out and, when the tail still waits on a stream,
    /// `(tail start, stream, seq)` so the caller can track it for clearing.
    pub fn take(
        &mut self,
        ptr: u64,
        size: u64,
        block: u64,
        now: u64,
        exact: bool,
    ) -> (u64, Option<(u64, Stream, u64)>) {
        self.list_remove(ptr);
        let r = self.ranges[&ptr];
        let kind = self.segments[&r.segment].kind;
        let mut given = r.size;
        let mut pending_tail = None;
        if r.size > size && (exact || r.size - size >= min_split(kind)) {
            given = size;
            let tail = Range {
                size: r.size - size,
                segment: r.segment,
                state: r.state,
            };
            self.ranges.insert(ptr + size, tail);
            self.list_insert(ptr + size);
            if let RangeState::Free {
                owner: Owner::Stream(s),
                seq,
                ..
            } = r.state
            {
                pending_tail = Some((ptr + size, s, seq));
            }
        }
        self.ranges.insert(
            ptr,
            Range {
                size: given,
                segment: r.segment,
                state: RangeState::Used(block),
            },
        );
        let seg = self
            .segments
            .get_mut(&r.segment)
            .expect("range without segment");
        seg.used_ranges += 1;
        seg.last_used = now;
        (given, pending_tail)
    }

    /// Frees the used range at `ptr`, merging it with free neighbours of the same owner.
    /// Returns the resulting free range: its start, owner and sequence number
    /// (a merge may move the start and raise the sequence number).
    pub fn release(&mut self, ptr: u64, owner: Owner, seq: u64, now: u64) -> (u64, Owner, u64) {
        let r = self.ranges[&ptr];
        assert!(matches!(r.state, RangeState::Used(_)), "range freed twice");
        let seg = self
            .segments
            .get_mut(&r.segment)
            .expect("range without segment");
        seg.used_ranges -= 1;
        seg.last_used = now;
        self.ranges.get_mut(&ptr).expect("range vanished").state = RangeState::Free {
            owner,
            seq,
            since: Instant::now(),
        };
        let ptr = self.merge_neighbours(ptr);
        self.list_insert(ptr);
        match self.ranges[&ptr].state {
            RangeState::Free { owner, seq, .. } => (ptr, owner, seq),
            RangeState::Used(_) => unreachable!("a merged range is free"),
        }
    }

    /// Makes the free range at `ptr` reusable by every stream, if it is free,
    /// owned by `stream` and freed at or before `seq`, merging it with cleared
    /// neighbours. Returns the resulting range start.
    pub fn clear(&mut self, ptr: u64, stream: Stream, up_to_seq: u64) -> Option<u64> {
        match self.ranges.get(&ptr)?.state {
            RangeState::Free {
                owner: Owner::Stream(s),
                seq,
                since,
            } if s == stream && seq <= up_to_seq => {
                self.list_remove(ptr);
                self.ranges.get_mut(&ptr).expect("range vanished").state = RangeState::Free {
                    owner: Owner::Cleared,
                    seq,
                    since,
                };
                let ptr = self.merge_neighbours(ptr);
                self.list_insert(ptr);
                Some(ptr)
            }
            _ => None,
        }
    }

    /// Merges the free range at `ptr` (not in any list) with free neighbours of the
    /// same segment and the same owner; the result is not in any list either.
    fn merge_neighbours(&mut self, mut ptr: u64) -> u64 {
        let seg = self.ranges[&ptr].segment;
        if let Some((&prev, _)) = self.ranges.range(..ptr).next_back() {
            if self.try_merge(prev, ptr, seg) {
                ptr = prev;
            }
        }
        let next = ptr + self.ranges[&ptr].size;
        self.try_merge(ptr, next, seg);
        ptr
    }

    /// Merges `right` into `left` when both are free ranges of `seg` with compatible owners.
    /// Exactly one of them is in a free list (the neighbour); it is taken out.
    fn try_merge(&mut self, left: u64, right: u64, seg: u64) -> bool {
        let (Some(l), Some(r)) = (
            self.ranges.get(&left).copied(),
            self.ranges.get(&right).copied(),
        ) else {
            return false;
        };
        if l.segment != seg || r.segment != seg || left + l.size != right {
            return false;
        }
        let (
            RangeState::Free {
                owner: lo,
                seq: ls,
                since: lt,
            },
            RangeState::Free {
                owner: ro,
                seq: rs,
                since: rt,
            },
        ) = (l.state, r.state)
        else {
            return false;
        };
        let Some((owner, seq)) = merged_owner((lo, ls), (ro, rs)) else {
            return false;
        };
        // Whichever side is listed is the neighbour; the other is the range being freed.
        for side in [left, right] {
            let range = self.ranges[&side];
            let key = self.key(&range).expect("free range has a key");
            if let Some(list) = self.free.get_mut(&key) {
                list.remove(&(range.size, side));
            }
        }
        self.ranges.remove(&right);
        let since = lt.max(rt);
        let merged = self.ranges.get_mut(&left).expect("range vanished");
        merged.size += r.size;
        merged.state = RangeState::Free { owner, seq, since };
        true
    }

    /// Bases of segments with no used range, not in a graph region, least recently used first.
    pub fn idle_segments(&self) -> Vec<u64> {
        let mut v: Vec<_> = self
            .segments
            .iter()
            .filter(|(_, s)| s.used_ranges == 0 && s.graph.is_none())
            .map(|(b, s)| (s.last_used, *b))
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, b)| b).collect()
    }

    /// Streams owning free ranges of the segment at `base` (work on them may still use it).
    pub fn pending_owners(&self, base: u64) -> Vec<Stream> {
        let size = self.segments[&base].size;
        let mut owners: Vec<Stream> = self
            .ranges
            .range(base..base + size)
            .filter_map(|(_, r)| match r.state {
                RangeState::Free {
                    owner: Owner::Stream(s),
                    ..
                } => Some(s),
                _ => None,
            })
            .collect();
        owners.sort_unstable();
        owners.dedup();
        owners
    }

    /// Removes an idle segment; returns its size.
    pub fn remove_segment(&mut self, base: u64) -> u64 {
        let seg = self.segments[&base].clone();
        assert_eq!(seg.used_ranges, 0, "removing a segment with live blocks");
        let ptrs: Vec<u64> = self
            .ranges
            .range(base..base + seg.size)
            .map(|(p, _)| *p)
            .collect();
        for p in ptrs {
            self.list_remove(p);
            self.ranges.remove(&p);
        }
        self.segments.remove(&base);
        seg.size
    }

    /// Moves every segment of graph region `graph` into the general pool.
    pub fn ungraph(&mut self, graph: GraphPoolId) {
        let bases: Vec<u64> = self
            .segments
            .iter()
            .filter(|(_, s)| s.graph == Some(graph))
            .map(|(b, _)| *b)
            .collect();
        for base in bases {
            let size = self.segments[&base].size;
            let ptrs: Vec<u64> = self
                .ranges
                .range(base..base + size)
                .map(|(p, _)| *p)
                .collect();
            ptrs.iter().for_each(|p| self.list_remove(*p));
            self.segments
                .get_mut(&base)
                .expect("segment vanished")
                .graph = None;
            ptrs.iter().for_each(|p| self.list_insert(*p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_ranges(a: &Arena) -> Vec<(u64, u64)> {
        a.ranges()
            .filter(|(_, r)| matches!(r.state, RangeState::Free { .. }))
            .map(|(p, r)| (p, r.size))
            .collect()
    }

    #[test]
    fn split_then_merge_restores_the_segment() {
        let mut a = Arena::default();
        a.add_segment(0, 4096, SizeKind::Small, None, 0);
        let p1 = a
            .best_fit(None, SizeKind::Small, Owner::Cleared, 1024)
            .unwrap();
        assert_eq!(a.take(p1, 1024, 1, 1, false), (1024, None));
        let p2 = a
            .best_fit(None, SizeKind::Small, Owner::Cleared, 1024)
            .unwrap();
        a.take(p2, 1024, 2, 2, false);
        assert_eq!(free_ranges(&a), vec![(2048, 2048)]);
        a.release(p1, Owner::Stream(1), 1, 3);
        assert_eq!(
            a.release(p2, Owner::Stream(1), 2, 4),
            (0, Owner::Stream(1), 2)
        );
        assert_eq!(
            free_ranges(&a),
            vec![(0, 2048), (2048, 2048)],
            "pending and cleared stay apart"
        );
        assert_eq!(a.clear(0, 1, 2), Some(0));
        assert_eq!(free_ranges(&a), vec![(0, 4096)]);
        assert_eq!(a.idle_segments(), vec![0]);
        assert!(a.pending_owners(0).is_empty());
    }

    #[test]
    fn ranges_of_different_streams_stay_apart_until_cleared() {
        let mut a = Arena::default();
        a.add_segment(0, 2048, SizeKind::Small, None, 0);
        a.take(0, 1024, 1, 0, false);
        a.take(1024, 1024, 2, 0, false);
        a.release(0, Owner::Stream(1), 1, 0);
        a.release(1024, Owner::Stream(2), 1, 0);
        assert_eq!(free_ranges(&a).len(), 2);
        assert_eq!(
            a.best_fit(None, SizeKind::Small, Owner::Stream(2), 512),
            Some(1024)
        );
        assert_eq!(
            a.clear(1024, 2, 0),
            None,
            "freed after the cleared sequence number"
        );
        assert_eq!(a.clear(1024, 2, 1), Some(1024));
        assert_eq!(a.clear(0, 1, 1), Some(0));
        assert_eq!(free_ranges(&a), vec![(0, 2048)]);
        assert_eq!(
            a.best_fit(None, SizeKind::Small, Owner::Cleared, 2048),
            Some(0)
        );
    }

    #[test]
    fn graph_segments_join_the_general_pool_when_released() {
        let mut a = Arena::default();
        a.add_segment(0, 2048, SizeKind::Small, Some(7), 0);
        assert_eq!(a.best_fit(None, SizeKind::Small, Owner::Cleared, 512), None);
        assert!(a.idle_segments().is_empty());
        a.ungraph(7);
        assert_eq!(
            a.best_fit(None, SizeKind::Small, Owner::Cleared, 512),
            Some(0)
        );
        assert_eq!(a.remove_segment(0), 2048);
    }
}
