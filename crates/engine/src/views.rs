//! The design's `list_shared_storages` and `show_view_chain`: storages that several tensors
//! view, and how their byte ranges relate.

use crate::{Checkpoint, Storage, Tensor};
use std::ops::Range;
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
    /// Every pair `(i, j, relation)` with `i < j`, indices into `views`.
    pub relations: Vec<(usize, usize, Relation)>,
}

/// Every storage that more than one tensor name views, in storage order. A view whose
/// extent overflows counts as reaching no bytes.
pub fn shared_storages(ckpt: &Checkpoint) -> Vec<SharedStorage<'_>> {
    // Count first: most storages have one view, and then no list is built for them.
    let mut counts = vec![0u32; ckpt.storages.len()];
    for tensor in &ckpt.tensors {
        if let Some(n) = counts.get_mut(tensor.tensor_impl().storage().id()) {
            *n = n.saturating_add(1);
        }
    }
    let mut views: Vec<Vec<View<'_>>> = vec![Vec::new(); ckpt.storages.len()];
    for tensor in &ckpt.tensors {
        if counts.get(tensor.tensor_impl().storage().id()) < Some(&2) {
            continue;
        }
        let imp = tensor.tensor_impl();
        if let Some(list) = views.get_mut(imp.storage().id()) {
            list.push(View {
                tensor,
                bytes: imp.byte_range().ok().flatten(),
            });
        }
    }
    ckpt.storages
        .iter()
        .zip(views)
        .filter(|(_, views)| views.len() > 1)
        .map(|(storage, views)| {
            let mut relations = Vec::new();
            for (i, a) in views.iter().enumerate() {
                for (j, b) in views.iter().enumerate().skip(i + 1) {
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
