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
    /// The pairs `(i, j, relation)` of views that share at least one byte, `i < j` indices
    /// into `views` (32 bits: a pair takes 12 bytes), sorted by `(i, j)`. A pair not listed
    /// is [`Relation::Disjoint`]: a flat buffer of a million views lists nothing.
    pub relations: Vec<(u32, u32, Relation)>,
}

/// What relating two views takes: the relation in [`SharedStorage::relations`].
/// Counted at twice its 12 bytes: what the pair costs beyond its relation (a line of the
/// `views` listing naming both tensors, the rules' passes over it) grows with it too.
const RELATION_BYTES: u64 = 2 * std::mem::size_of::<(u32, u32, Relation)>() as u64;

/// What relating a storage takes per view: its place in the list of views of shared
/// storages, in its storage's `views` and in the sweep's order. Counted twice, for what the
/// rules hold per view (TP106's list of names).
const VIEW_BYTES: u64 = 2
    * (std::mem::size_of::<(usize, View<'static>)>()
        + std::mem::size_of::<View<'static>>()
        + std::mem::size_of::<(u32, &Range<u64>)>()) as u64;

/// What a listed pair's line takes beyond its names (the JSON of `views`, indented).
const LISTED_PAIR_BYTES: u64 = 128;

/// What an audit's finding about two overlapping views may take beyond their names (TP101
/// reports each partly overlapping pair).
const FINDING_BYTES: u64 = 256;

/// Refuses, before [`shared_storages`] runs, a checkpoint whose view analysis would take more
/// than `limit` bytes. It lists every pair of views of a storage that share bytes, and
/// findings name both tensors of each such pair, so a few kilobytes of pickle naming one
/// tensor thousands of times (every pair identical) would otherwise take gigabytes and
/// minutes. The estimate is exact where it matters: each view, each pair that shares bytes
/// (counted per view in O(n log n), identical ranges as groups), and for each pair that
/// shares some but not all of them a finding and its names in up to six strings; disjoint
/// views (a flat buffer) cost only their views.
pub fn check_budget(ckpt: &Checkpoint, path: &Path, limit: u64) -> Result<()> {
    check(ckpt, path, limit, storage_cost)
}

/// [`check_budget`] for a listing of every pair ([`shared_storages`] rendered by `views`):
/// each listed pair names both tensors, so its text grows with the names of every pair,
/// identical ones too: eight thousand names of 8 KB tied to one tensor list 32 million pairs
/// and half a terabyte of names, though their relations alone fit a gigabyte.
pub fn check_listing_budget(ckpt: &Checkpoint, path: &Path, limit: u64) -> Result<()> {
    check(ckpt, path, limit, |views| {
        let pairs = pair_counts(views);
        views_cost(views, &pairs)
            .saturating_add(pairs.listed().saturating_mul(LISTED_PAIR_BYTES))
            // A name may take six times its length once escaped (`\u0000`).
            .saturating_add(pairs.listed_named().saturating_mul(6))
    })
}

fn check(
    ckpt: &Checkpoint,
    path: &Path,
    limit: u64,
    cost: impl Fn(&[BudgetView]) -> u64,
) -> Result<()> {
    // Only storages with two views or more cost anything.
    let viewed_twice = ViewedTwice::of(ckpt);
    // (storage, byte range, name bytes) per view, sorted so views of one storage, and views
    // of one byte range within it, are side by side.
    let mut views: Vec<BudgetView> = ckpt
        .tensors
        .iter()
        .filter(|t| viewed_twice.contains(t.storage_index()))
        .map(|t| {
            let imp = t.tensor_impl();
            let range = imp.byte_range().ok().flatten();
            (t.storage_index(), range, t.name().len() as u64)
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
        needed = needed.saturating_add(cost(storage));
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

/// A view as [`check_budget`] weighs it: its storage, byte range and name's length.
type BudgetView = (usize, Option<Range<u64>>, u64);

/// The pairs of views of one storage that share bytes, as [`check_budget`] counts them
/// without listing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct PairCounts {
    /// Pairs of views of one non-empty byte range.
    identical: u64,
    /// Pairs that share some bytes but not all (either may contain the other).
    overlapping: u64,
    /// Over those pairs, the length of both names.
    named: u64,
    /// Over the identical pairs, the length of both names.
    identical_named: u64,
}

impl PairCounts {
    /// Every pair [`SharedStorage::relations`] lists.
    fn listed(&self) -> u64 {
        self.identical.saturating_add(self.overlapping)
    }

    /// Over every pair listed, the length of both names.
    fn listed_named(&self) -> u64 {
        self.identical_named.saturating_add(self.named)
    }
}

/// The pairs of views of one storage, `views` sorted by byte range, that share bytes; in
/// O(n log n) for n views, however many pairs there are.
fn pair_counts(views: &[BudgetView]) -> PairCounts {
    let ranges: Vec<&Range<u64>> = views.iter().filter_map(|v| v.1.as_ref()).collect();
    let m = ranges.len() as u64;
    let mut starts: Vec<u64> = ranges.iter().map(|r| r.start).collect();
    let mut ends: Vec<u64> = ranges.iter().map(|r| r.end).collect();
    starts.sort_unstable();
    ends.sort_unstable();
    let mut counts = PairCounts::default();
    // Over views that reach bytes: how many others each shares some but not all bytes with
    // (its degree), and the sum of its name's length times that.
    let (mut degrees, mut named) = (0u64, 0u64);
    for same in views.chunk_by(|a, b| a.1 == b.1) {
        let Some(range) = &same[0].1 else { continue };
        let g = same.len() as u64;
        let degree = if range.is_empty() {
            // An empty range shares bytes (by `Relation::of`) with the ranges strictly
            // around it: those starting before it, less those also ending at or before it,
            // which are all but the empty ranges at its own place (its group).
            let before = starts.partition_point(|&s| s < range.start) as u64;
            let ended = ends.partition_point(|&e| e <= range.start) as u64;
            before.saturating_add(g).saturating_sub(ended)
        } else {
            // Ranges ending at or before this one's start, or starting at or after its end,
            // are disjoint from it; those two sets cannot meet for a non-empty range.
            let before = ends.partition_point(|&e| e <= range.start) as u64;
            let after = m - starts.partition_point(|&s| s < range.end) as u64;
            counts.identical = counts.identical.saturating_add(g.saturating_mul(g - 1) / 2);
            // Each name is in a pair with each of the group's others.
            let names = same.iter().fold(0u64, |acc, v| acc.saturating_add(v.2));
            counts.identical_named = counts
                .identical_named
                .saturating_add(names.saturating_mul(g - 1));
            m.saturating_sub(g)
                .saturating_sub(before)
                .saturating_sub(after)
        };
        for view in same {
            degrees = degrees.saturating_add(degree);
            named = named.saturating_add(view.2.saturating_mul(degree));
        }
    }
    counts.overlapping = degrees / 2;
    counts.named = named;
    counts
}

/// [`check_budget`]'s bound for the views of one storage, sorted by byte range.
fn storage_cost(views: &[BudgetView]) -> u64 {
    views_cost(views, &pair_counts(views))
}

/// [`storage_cost`], given the views' [`pair_counts`].
fn views_cost(views: &[BudgetView], pairs: &PairCounts) -> u64 {
    let names = views.iter().fold(0u64, |acc, v| acc.saturating_add(v.2));
    (views.len() as u64)
        .saturating_mul(VIEW_BYTES)
        .saturating_add(pairs.listed().saturating_mul(RELATION_BYTES))
        .saturating_add(pairs.overlapping.saturating_mul(FINDING_BYTES))
        // Each overlapping pair's names in its findings (TP101, TP102), and every name in a
        // storage-wide finding or two (TP103, TP106).
        .saturating_add(pairs.named.saturating_mul(6))
        .saturating_add(names.saturating_mul(4))
}

/// Which storages two tensors or more view, by storage id: found first, so that a million
/// storages of one tensor each make no list of views. Two bits a storage, not a count: a
/// million storages take 250 KB of fresh pages rather than 4 MB.
struct ViewedTwice {
    twice: Vec<u64>,
}

impl ViewedTwice {
    fn of(ckpt: &Checkpoint) -> Self {
        let words = ckpt.storages.len().div_ceil(64);
        let (mut once, mut twice) = (vec![0u64; words], vec![0u64; words]);
        for tensor in &ckpt.tensors {
            let (word, bit) = Self::at(tensor.storage_index());
            if let (Some(once), Some(twice)) = (once.get_mut(word), twice.get_mut(word)) {
                *twice |= *once & bit;
                *once |= bit;
            }
        }
        ViewedTwice { twice }
    }

    fn at(storage: usize) -> (usize, u64) {
        (storage / 64, 1 << (storage % 64))
    }

    fn contains(&self, storage: usize) -> bool {
        let (word, bit) = Self::at(storage);
        self.twice.get(word).is_some_and(|w| w & bit != 0)
    }
}

/// Every storage that more than one tensor name views, in storage order. A view whose
/// extent overflows counts as reaching no bytes.
pub fn shared_storages(ckpt: &Checkpoint) -> Vec<SharedStorage<'_>> {
    let viewed_twice = ViewedTwice::of(ckpt);
    // (storage id, view) of the storages viewed twice or more; the stable sort keeps each
    // storage's views in tensor order.
    let mut shared: Vec<(usize, View<'_>)> = ckpt
        .tensors
        .iter()
        .filter(|t| viewed_twice.contains(t.storage_index()))
        .map(|tensor| {
            let imp = tensor.tensor_impl();
            let view = View {
                tensor,
                bytes: imp.byte_range().ok().flatten(),
            };
            (tensor.storage_index(), view)
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
            let relations = overlapping_pairs(views.iter().map(|v| v.bytes.as_ref()));
            SharedStorage {
                storage,
                views,
                relations,
            }
        })
        .collect()
}

/// The pairs of views that share bytes, given each view's byte range in view order, as
/// [`SharedStorage::relations`] lists them: by a sweep over the views in byte order, in
/// O(n log n + pairs) time and O(n + pairs) memory.
fn overlapping_pairs<'r>(
    ranges: impl IntoIterator<Item = Option<&'r Range<u64>>>,
) -> Vec<(u32, u32, Relation)> {
    // The views that reach bytes, by (start, end): an empty range comes before the non-empty
    // ones starting where it does (it shares no byte with them), so a view's walk below
    // meets only views it shares bytes with.
    let mut order: Vec<(u32, &Range<u64>)> = (0u32..)
        .zip(ranges)
        .filter_map(|(i, r)| Some((i, r?)))
        .collect();
    order.sort_unstable_by_key(|&(i, r)| (r.start, r.end, i));
    // The views after `order[k]` that start before it ends: the only ones that can share
    // its bytes (later ones start at or after its end).
    let reached = |k: usize| {
        let end = order.get(k).map_or(0, |(_, r)| r.end);
        order
            .get(k + 1..)
            .unwrap_or_default()
            .iter()
            .take_while(move |(_, r)| r.start < end)
    };
    // Counted first, so the list is sized once: growing by doubling would hold the old and
    // the new buffer at once, half again what `check_budget` allowed.
    let count = (0..order.len()).map(|k| reached(k).count()).sum();
    let mut pairs = Vec::with_capacity(count);
    for (k, &(a, ra)) in order.iter().enumerate() {
        for &(c, rc) in reached(k) {
            let (i, j, ri, rj) = if a < c {
                (a, c, ra, rc)
            } else {
                (c, a, rc, ra)
            };
            let relation = Relation::of(Some(ri), Some(rj));
            if relation != Relation::Disjoint {
                pairs.push((i, j, relation));
            }
        }
    }
    debug_assert_eq!(
        pairs.len(),
        count,
        "the walk met a view it shares no byte with"
    );
    pairs.sort_unstable_by_key(|&(i, j, _)| (i, j));
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Storages viewed by two tensors or more, by storage id, on either side of a word of
    /// the bit sets and at their ends: 130 storages, each viewed by two tensors where its id
    /// is a multiple of 63 or the last, by one otherwise.
    #[test]
    fn storages_viewed_twice_are_found_across_words() {
        use crate::{DType, DataPtr, Device, Format, Layout, Tensor, TensorImpl};
        let storages: Vec<Arc<Storage>> = (0..130)
            .map(|i| {
                let ptr = DataPtr::none(Device::Cpu);
                let s = crate::testing::storage(i, i.to_string(), DType::UInt8, 4, "cpu", ptr);
                Arc::new(s)
            })
            .collect();
        let views = |i: usize| (if i.is_multiple_of(63) { 2 } else { 1 }) + usize::from(i == 129);
        let tensors = storages
            .iter()
            .enumerate()
            .flat_map(|(i, s)| (0..views(i)).map(move |v| (i, v, s)))
            .map(|(i, v, s)| {
                let layout = Layout::contiguous(vec![4]).unwrap();
                let imp =
                    TensorImpl::new(layout, DType::UInt8, Device::Cpu, false, false, s.clone());
                Tensor::new(format!("t{i}.{v}"), Arc::new(imp))
            })
            .collect();
        let ckpt = crate::testing::checkpoint("v.pt", Format::PytorchZip, tensors, storages);
        let twice = ViewedTwice::of(&ckpt);
        let found: Vec<usize> = (0..140).filter(|&i| twice.contains(i)).collect();
        assert_eq!(found, [0, 63, 126, 129]);
        let shared: Vec<usize> = shared_storages(&ckpt)
            .iter()
            .map(|s| s.storage.id().index())
            .collect();
        assert_eq!(shared, found);
    }

    /// Every pair of `ranges` related as the views were before the sweep (each pair by
    /// `Relation::of`), less the disjoint ones.
    fn all_pairs(ranges: &[Option<Range<u64>>]) -> Vec<(u32, u32, Relation)> {
        let mut pairs = Vec::new();
        for (i, a) in (0u32..).zip(ranges) {
            for (j, b) in (0u32..).zip(ranges).skip(i as usize + 1) {
                let relation = Relation::of(a.as_ref(), b.as_ref());
                if relation != Relation::Disjoint {
                    pairs.push((i, j, relation));
                }
            }
        }
        pairs
    }

    /// `ranges` as `check_budget` weighs them: one storage, name `i` a view, sorted by range.
    fn budget_views(ranges: &[Option<Range<u64>>]) -> Vec<BudgetView> {
        let mut views: Vec<BudgetView> = ranges
            .iter()
            .enumerate()
            .map(|(i, r)| (0, r.clone(), i.to_string().len() as u64))
            .collect();
        views
            .sort_unstable_by_key(|(id, range, _)| (*id, range.as_ref().map(|r| (r.start, r.end))));
        views
    }

    /// A view's byte range: none, or a start and length from a few values, so that ties,
    /// empty ranges and ranges sharing an end are common.
    fn range() -> impl Strategy<Value = Option<Range<u64>>> {
        prop::option::weighted(0.9, (0u64..12, 0u64..5).prop_map(|(s, l)| s..s + l))
    }

    proptest! {
        #[test]
        fn the_sweep_finds_exactly_the_pairs_that_share_bytes(
            ranges in prop::collection::vec(range(), 0..40),
        ) {
            let swept = overlapping_pairs(ranges.iter().map(Option::as_ref));
            prop_assert_eq!(&swept, &all_pairs(&ranges));
            let counts = pair_counts(&budget_views(&ranges));
            prop_assert_eq!(counts.listed(), swept.len() as u64);
            let identical = swept.iter().filter(|p| p.2 == Relation::Identical).count();
            prop_assert_eq!(counts.identical, identical as u64);
            // Each pair that shares some bytes but not all names both its views.
            let named: u64 = swept
                .iter()
                .filter(|p| p.2 != Relation::Identical)
                .map(|&(i, j, _)| (i.to_string().len() + j.to_string().len()) as u64)
                .sum();
            prop_assert_eq!(counts.named, named);
            // And every pair listed, both names: what `views` prints of them.
            let listed: u64 = swept
                .iter()
                .map(|&(i, j, _)| (i.to_string().len() + j.to_string().len()) as u64)
                .sum();
            prop_assert_eq!(counts.listed_named(), listed);
        }
    }

    #[test]
    fn empty_ranges_share_bytes_only_with_ranges_strictly_around_them() {
        let ranges = [
            Some(4..4),
            Some(0..8),
            Some(4..4),
            Some(4..8),
            Some(0..4),
            None,
        ];
        // [4, 4) lies inside [0, 8) only: at the start of [4, 8) and the end of [0, 4) it
        // shares nothing, and two empty ranges never do.
        let expected = vec![
            (0, 1, Relation::ContainedBy),
            (1, 2, Relation::Contains),
            (1, 3, Relation::Contains),
            (1, 4, Relation::Contains),
        ];
        assert_eq!(all_pairs(&ranges), expected);
        assert_eq!(
            overlapping_pairs(ranges.iter().map(Option::as_ref)),
            expected
        );
        assert_eq!(pair_counts(&budget_views(&ranges)).listed(), 4);
    }

    #[test]
    fn a_flat_buffer_costs_its_views_and_ties_cost_every_pair() {
        let flat: Vec<_> = (0..1000u64).map(|i| Some(4 * i..4 * (i + 1))).collect();
        assert!(overlapping_pairs(flat.iter().map(Option::as_ref)).is_empty());
        assert_eq!(pair_counts(&budget_views(&flat)), PairCounts::default());
        let tied = vec![Some(0..4); 1000];
        let counts = pair_counts(&budget_views(&tied));
        assert_eq!(counts.identical, 1000 * 999 / 2);
        assert_eq!(counts.overlapping, 0);
        // Every view a prefix of the next: every pair shares bytes and none is identical.
        let prefixes: Vec<_> = (1..=1000u64).map(|n| Some(0..n)).collect();
        let counts = pair_counts(&budget_views(&prefixes));
        assert_eq!(counts.overlapping, 1000 * 999 / 2);
        assert_eq!(counts.identical, 0);
    }

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
