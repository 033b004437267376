//! The design's `list_shared_storages` and `show_view_chain`: storages that several tensors
//! view, and how their byte ranges relate.

use crate::error::{Error, Result};
use crate::{Checkpoint, Storage, Tensor};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// How the bytes two views of one storage reach relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The same bytes.
    Identical,
    /// The first reaches every byte of the second, and more.
    Contains,
    /// The second reaches every byte of the first, and more.
    ContainedBy,
    /// They share some bytes and each has bytes of its own.
    PartialOverlap,
    /// No byte in common (or one reaches no bytes at all).
    Disjoint,
}

impl Relation {
    /// Relation of byte range `a` to byte range `b`; `None` reaches nothing.
    pub fn of(a: Option<&Range<u64>>, b: Option<&Range<u64>>) -> Relation {
        let (Some(a), Some(b)) = (a, b) else {
            return Relation::Disjoint;
        };
        if a.end <= b.start || b.end <= a.start {
            Relation::Disjoint
        } else if a == b {
            Relation::Identical
        } else if a.start <= b.start && b.end <= a.end {
            Relation::Contains
        } else if b.start <= a.start && a.end <= b.end {
            Relation::ContainedBy
        } else {
            Relation::PartialOverlap
        }
    }

    /// Stable name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Relation::Identical => "identical",
            Relation::Contains => "contains",
            Relation::ContainedBy => "contained-by",
            Relation::PartialOverlap => "partial-overlap",
            Relation::Disjoint => "disjoint",
        }
    }
}

/// One tensor's view of a shared storage.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// The tensor.
    pub tensor: &'a Tensor,
    /// Bytes of the storage it reaches; `None` when it reaches none.
    pub bytes: Option<Range<u64>>,
}

/// A storage more than one tensor views.
#[derive(Debug, Clone)]
pub struct SharedStorage<'a> {
    /// The storage.
    pub storage: &'a Arc<Storage>,
    /// Its views, in checkpoint order.
    pub views: Vec<View<'a>>,
    /// Every pair `(i, j, relation)` with `i < j`, indices into `views` (32 bits: a pair
    /// takes 12 bytes, and there are n²/2 of them).
    pub relations: Vec<(u32, u32, Relation)>,
}

/// What relating two views takes: the relation in [`SharedStorage::relations`].
/// Counted at twice its 12 bytes: what the pair costs beyond its relation (a line of the
/// `views` listing naming both tensors, the rules' passes over it) grows with it too.
const RELATION_BYTES: u64 = 2 * std::mem::size_of::<(u32, u32, Relation)>() as u64;

/// What an audit's finding about two overlapping views may take beyond their names (TP101
/// reports each partly overlapping pair).
const FINDING_BYTES: u64 = 256;

/// Refuses, before [`shared_storages`] runs, a checkpoint whose view analysis would take more
/// than `limit` bytes. It relates every pair of views of a storage, and findings name both
/// tensors of each overlapping pair, so a few kilobytes of pickle naming one tensor thousands
/// of times would otherwise take gigabytes and minutes. The estimate is an upper bound, exact
/// where it matters: every pair's relation, and for each pair that shares some but not all
/// bytes (counted per view in O(n log n)), a finding and its names in up to six strings;
/// disjoint views (a flat buffer) and tied names cost only their relations.
pub fn check_budget(ckpt: &Checkpoint, path: &Path, limit: u64) -> Result<()> {
    // Only storages with two views or more cost anything.
    let views_of = views_per_storage(ckpt);
    // (storage, byte range, name bytes) per view, sorted so views of one storage, and views
    // of one byte range within it, are side by side.
    let mut views: Vec<(usize, Option<Range<u64>>, u64)> = ckpt
        .tensors
        .iter()
        .filter(|t| {
            views_of
                .get(t.tensor_impl().storage().id().index())
                .is_some_and(|&n| n >= 2)
        })
        .map(|t| {
            let imp = t.tensor_impl();
            let range = imp.byte_range().ok().flatten();
            (imp.storage().id().index(), range, t.name().len() as u64)
        })
        .collect();
    views.sort_unstable_by_key(|(id, range, _)| (*id, range.as_ref().map(|r| (r.start, r.end))));
    let mut needed = 0u64;
    let mut largest = (0u64, 0usize);
    for storage in views.chunk_by(|a, b| a.0 == b.0) {
        let n = storage.len() as u64;
        if n < 2 {
            continue;
        }
        needed = needed.saturating_add(storage_cost(storage));
        largest = largest.max((n, storage[0].0));
    }
    if needed > limit {
        return Err(Error::MemoryBudget {
            path: path.to_owned(),
            needed,
            limit,
            what: format!(
                "relating the views of shared storages ({} tensors view storage {})",
                largest.0, largest.1
            ),
        });
    }
    Ok(())
}

/// [`check_budget`]'s bound for the views of one storage, sorted by byte range.
fn storage_cost(views: &[(usize, Option<Range<u64>>, u64)]) -> u64 {
    let n = views.len() as u64;
    let ranges: Vec<&Range<u64>> = views.iter().filter_map(|v| v.1.as_ref()).collect();
    let m = ranges.len() as u64;
    let mut starts: Vec<u64> = ranges.iter().map(|r| r.start).collect();
    let mut ends: Vec<u64> = ranges.iter().map(|r| r.end).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    // Over views that reach bytes: how many others each shares some but not all bytes with
    // (its degree), and the sum of its name's length times that.
    let (mut degrees, mut named) = (0u64, 0u64);
    for same in views.chunk_by(|a, b| a.1 == b.1) {
        let Some(range) = &same[0].1 else { continue };
        let identical = same.len() as u64;
        let degree = if range.is_empty() {
            // Never built (empty views reach no bytes), but bounded all the same.
            m - 1
        } else {
            // Ranges ending at or before this one's start, or starting at or after its end,
            // are disjoint from it; those two sets cannot meet for non-empty ranges.
            let before = ends.partition_point(|&e| e <= range.start) as u64;
            let after = m - starts.partition_point(|&s| s < range.end) as u64;
            m.saturating_sub(identical)
                .saturating_sub(before)
                .saturating_sub(after)
        };
        for view in same {
            degrees = degrees.saturating_add(degree);
            named = named.saturating_add(view.2.saturating_mul(degree));
        }
    }
    let names = views.iter().fold(0u64, |acc, v| acc.saturating_add(v.2));
    let pairs = n.saturating_mul(n - 1) / 2;
    pairs
        .saturating_mul(RELATION_BYTES)
        .saturating_add((degrees / 2).saturating_mul(FINDING_BYTES))
        // Each overlapping pair's names in its findings (TP101, TP102), and every name in a
        // storage-wide finding or two (TP103, TP106).
        .saturating_add(named.saturating_mul(6))
        .saturating_add(names.saturating_mul(4))
}

/// How many tensors view each storage, by storage id: counted first, so that a million
/// storages of one tensor each make no list of views.
fn views_per_storage(ckpt: &Checkpoint) -> Vec<u32> {
    let mut counts = vec![0u32; ckpt.storages.len()];
    for tensor in &ckpt.tensors {
        if let Some(n) = counts.get_mut(tensor.tensor_impl().storage().id().index()) {
            *n = n.saturating_add(1);
        }
    }
    counts
}

/// Every storage that more than one tensor name views, in storage order. A view whose
/// extent overflows counts as reaching no bytes.
pub fn shared_storages(ckpt: &Checkpoint) -> Vec<SharedStorage<'_>> {
    let counts = views_per_storage(ckpt);
    // (storage id, view) of the storages viewed twice or more; the stable sort keeps each
    // storage's views in tensor order.
    let mut shared: Vec<(usize, View<'_>)> = ckpt
        .tensors
        .iter()
        .filter(|t| counts.get(t.tensor_impl().storage().id().index()) >= Some(&2))
        .map(|tensor| {
            let imp = tensor.tensor_impl();
            let view = View {
                tensor,
                bytes: imp.byte_range().ok().flatten(),
            };
            (imp.storage().id().index(), view)
        })
        .collect();
    shared.sort_by_key(|(id, _)| *id);
    shared
        .chunk_by(|a, b| a.0 == b.0)
        .filter_map(|group| {
            let storage = ckpt.storages.get(group.first()?.0)?;
            Some((
                storage,
                group.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
            ))
        })
        .map(|(storage, views)| {
            // Sized once: growing by doubling would hold the old and the new buffer at once,
            // half again what `check_budget` allowed.
            let n = views.len();
            let mut relations = Vec::with_capacity(n.saturating_mul(n.saturating_sub(1)) / 2);
            for (i, a) in (0u32..).zip(&views) {
                for (j, b) in (0u32..).zip(&views).skip(i as usize + 1) {
                    relations.push((i, j, Relation::of(a.bytes.as_ref(), b.bytes.as_ref())));
                }
            }
            SharedStorage {
                storage,
                views,
                relations,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relations_of_byte_ranges() {
        let r = |a: Range<u64>, b: Range<u64>| Relation::of(Some(&a), Some(&b));
        assert_eq!(r(0..72, 0..72), Relation::Identical);
        assert_eq!(r(0..72, 8..64), Relation::Contains);
        assert_eq!(r(16..40, 0..72), Relation::ContainedBy);
        assert_eq!(r(0..24, 16..40), Relation::PartialOverlap);
        assert_eq!(r(0..16, 16..40), Relation::Disjoint);
        assert_eq!(Relation::of(None, Some(&(0..8))), Relation::Disjoint);
    }
}
