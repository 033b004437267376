//! Walking a strided layout in logical (row-major) order, one run of its innermost dimension
//! at a time.
//!
//! Runs rather than single elements, so a reader can take a contiguous stretch of storage in
//! bulk and step element by element only where the strides make it. Broadcast (stride-0)
//! dimensions are not walked: they reach the same elements again, so the walk covers each
//! reached element once and says how many times every one of them repeats.

use super::Layout;
use crate::error::{Error, Result};

/// One dimension left to walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dim {
    size: u64,
    /// Storage stride, in elements.
    stride: u64,
    /// Logical (row-major) stride: the product of the sizes after this dimension.
    logical: u64,
}

/// A layout reduced to the dimensions worth walking: size-1 dimensions dropped, broadcast
/// dimensions folded into [`Walk::repeat`], and neighbours that read storage and logical
/// order alike merged into one. Built by [`Layout::walk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    storage_offset: u64,
    /// Outer dimensions, walked as an odometer, last fastest.
    outer: Vec<Dim>,
    /// The innermost dimension: one [`Run`] per outer position.
    inner: Dim,
    repeat: u64,
    empty: bool,
}

/// `len` elements of a view: the `j`-th at storage element `start + j × stride` and at
/// logical index `logical + j × logical_stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Storage index of the first element, in elements.
    pub start: u64,
    /// Number of elements.
    pub len: u64,
    /// Storage step between elements, in elements.
    pub stride: u64,
    /// Logical index of the first element.
    pub logical: u64,
    /// Logical step between elements.
    pub logical_stride: u64,
}

impl Run {
    /// Whether the elements sit side by side in storage.
    pub fn is_contiguous(&self) -> bool {
        self.stride == 1 || self.len <= 1
    }

    /// Storage index of element `j`; `None` past the run or on overflow.
    pub fn element(&self, j: u64) -> Option<u64> {
        (j < self.len).then_some(())?;
        self.start.checked_add(j.checked_mul(self.stride)?)
    }

    /// Logical index of element `j`; `None` past the run or on overflow.
    pub fn logical_index(&self, j: u64) -> Option<u64> {
        (j < self.len).then_some(())?;
        self.logical
            .checked_add(j.checked_mul(self.logical_stride)?)
    }
}

impl Layout {
    /// The walk of this layout's elements in logical order (see [`Walk`]).
    ///
    /// Every product the walk needs is bounded by the element count or the view's extent,
    /// which [`Layout::new`] checked, so an overflow here means a layout that cannot exist.
    pub fn walk(&self) -> Result<Walk> {
        let overflow = || Error::Overflow {
            what: "layout walk",
        };
        let unit = Dim {
            size: 1,
            stride: 1,
            logical: 0,
        };
        if self.numel() == 0 {
            return Ok(Walk {
                storage_offset: self.storage_offset(),
                outer: Vec::new(),
                inner: unit,
                repeat: 1,
                empty: true,
            });
        }
        // Logical strides, innermost first, then put back in order.
        let mut logical = Vec::with_capacity(self.sizes().len());
        let mut acc = 1u64;
        for &size in self.sizes().iter().rev() {
            logical.push(acc);
            acc = acc.checked_mul(size).ok_or_else(overflow)?;
        }
        logical.reverse();

        let mut repeat = 1u64;
        let mut dims: Vec<Dim> = Vec::with_capacity(self.sizes().len());
        for ((&size, &stride), &logical) in self.sizes().iter().zip(self.strides()).zip(&logical) {
            if size == 1 {
                continue;
            }
            if stride == 0 {
                // In logical order the first repeat (index 0 here) comes first, so walking
                // only index 0 keeps every first occurrence.
                repeat = repeat.checked_mul(size).ok_or_else(overflow)?;
                continue;
            }
            if let Some(prev) = dims.last_mut() {
                if stride.checked_mul(size) == Some(prev.stride)
                    && logical.checked_mul(size) == Some(prev.logical)
                {
                    prev.size = prev.size.checked_mul(size).ok_or_else(overflow)?;
                    prev.stride = stride;
                    prev.logical = logical;
                    continue;
                }
            }
            dims.push(Dim {
                size,
                stride,
                logical,
            });
        }
        let inner = dims.pop().unwrap_or(unit);
        Ok(Walk {
            storage_offset: self.storage_offset(),
            outer: dims,
            inner,
            repeat,
            empty: false,
        })
    }
}

impl Walk {
    /// How many times each element the runs cover appears in the view: the product of the
    /// broadcast dimensions' sizes.
    pub fn repeat(&self) -> u64 {
        self.repeat
    }

    /// Elements the runs cover together: the element count divided by [`Walk::repeat`].
    pub fn walked(&self) -> u64 {
        if self.empty {
            return 0;
        }
        // Bounded by the layout's element count, which fitted.
        self.outer
            .iter()
            .fold(self.inner.size, |acc, d| acc.saturating_mul(d.size))
    }

    /// The runs, in logical order; none for an empty layout.
    pub fn runs(&self) -> Runs<'_> {
        Runs {
            walk: self,
            index: vec![0; self.outer.len()],
            done: self.empty,
        }
    }
}

/// The runs of a [`Walk`], in logical order. Memory is proportional to the rank.
#[derive(Debug, Clone)]
pub struct Runs<'a> {
    walk: &'a Walk,
    /// The current outer position.
    index: Vec<u64>,
    done: bool,
}

impl Runs<'_> {
    /// The run at the current outer position.
    fn current(&self) -> Option<Run> {
        let walk = self.walk;
        let mut start = walk.storage_offset;
        let mut logical = 0u64;
        for (&i, dim) in self.index.iter().zip(&walk.outer) {
            start = start.checked_add(i.checked_mul(dim.stride)?)?;
            logical = logical.checked_add(i.checked_mul(dim.logical)?)?;
        }
        Some(Run {
            start,
            len: walk.inner.size,
            stride: walk.inner.stride,
            logical,
            logical_stride: walk.inner.logical,
        })
    }

    /// Moves to the next outer position; `false` past the last one.
    fn advance(&mut self) -> bool {
        for (i, dim) in self.index.iter_mut().zip(&self.walk.outer).rev() {
            *i = i.saturating_add(1);
            if *i < dim.size {
                return true;
            }
            *i = 0;
        }
        false
    }
}

impl Iterator for Runs<'_> {
    type Item = Run;

    fn next(&mut self) -> Option<Run> {
        if self.done {
            return None;
        }
        // Positions stay inside the extent Layout::new checked; a failed check ends the
        // walk rather than wrapping.
        let run = self.current();
        self.done = run.is_none() || !self.advance();
        run
    }
}

impl std::iter::FusedIterator for Runs<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::tests::l;
    use proptest::prelude::*;

    /// Every (storage index, logical index) pair the runs visit, in order.
    fn visits(layout: &Layout) -> Vec<(u64, u64)> {
        let walk = layout.walk().unwrap();
        walk.runs()
            .flat_map(|run| (0..run.len).map(move |j| (run.element(j), run.logical_index(j))))
            .map(|(e, i)| (e.unwrap(), i.unwrap()))
            .collect()
    }

    /// The same pairs from the multi-index of every logical element whose broadcast indices
    /// are all 0, in row-major order.
    fn gathered(layout: &Layout) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        'elements: for logical in 0..layout.numel() {
            let mut rest = logical;
            let mut element = layout.storage_offset();
            for (&s, &stride) in layout.sizes().iter().zip(layout.strides()).rev() {
                let i = rest % s;
                if stride == 0 && i != 0 {
                    continue 'elements;
                }
                element += i * stride;
                rest /= s;
            }
            out.push((element, logical));
        }
        out
    }

    #[test]
    fn contiguous_rows_merge_into_one_run() {
        let walk = l(&[2, 3, 4], &[12, 4, 1], 5).walk().unwrap();
        let runs: Vec<Run> = walk.runs().collect();
        assert_eq!(
            runs,
            vec![Run {
                start: 5,
                len: 24,
                stride: 1,
                logical: 0,
                logical_stride: 1
            }]
        );
        assert!(runs[0].is_contiguous());
        assert_eq!((walk.repeat(), walk.walked()), (1, 24));
    }

    #[test]
    fn a_transpose_walks_columns_in_logical_order() {
        // Storage [[0, 1, 2], [3, 4, 5]] transposed: [[0, 3], [1, 4], [2, 5]].
        let layout = l(&[3, 2], &[1, 3], 0);
        let runs: Vec<Run> = layout.walk().unwrap().runs().collect();
        assert_eq!(runs.len(), 3);
        assert_eq!((runs[1].start, runs[1].stride, runs[1].logical), (1, 3, 2));
        assert!(!runs[1].is_contiguous());
        assert_eq!(
            visits(&layout),
            vec![(0, 0), (3, 1), (1, 2), (4, 3), (2, 4), (5, 5)]
        );
    }

    #[test]
    fn contiguous_inner_rows_between_strided_outer_ones_stay_bulk() {
        // x[:, :2, :] of a [4, 3, 6]: rows of 12 contiguous elements, 18 apart.
        let runs: Vec<Run> = l(&[4, 2, 6], &[18, 6, 1], 0)
            .walk()
            .unwrap()
            .runs()
            .collect();
        assert_eq!(runs.len(), 4);
        assert!(runs.iter().all(|r| r.is_contiguous() && r.len == 12));
        assert_eq!(runs[3].start, 54);
        assert_eq!(runs[3].logical, 36);
    }

    #[test]
    fn broadcasts_are_repeats_not_walks() {
        let walk = l(&[1000, 3], &[0, 1], 0).walk().unwrap();
        assert_eq!(
            (walk.repeat(), walk.walked(), walk.runs().count()),
            (1000, 3, 1)
        );
        // A column broadcast along rows: runs of one element, 5 logical apart.
        let layout = l(&[3, 5], &[1, 0], 2);
        assert_eq!(visits(&layout), vec![(2, 0), (3, 5), (4, 10)]);
        // Huge broadcasts cost nothing.
        let walk = l(&[1 << 40, 1 << 20], &[0, 0], 1).walk().unwrap();
        assert_eq!(walk.repeat(), 1 << 60);
        assert_eq!(visits(&l(&[1 << 40, 1 << 20], &[0, 0], 1)), vec![(1, 0)]);
    }

    #[test]
    fn empty_and_scalar_layouts() {
        let empty = l(&[0, 1 << 40], &[7, 3], 9).walk().unwrap();
        assert_eq!((empty.runs().count(), empty.walked()), (0, 0));
        assert_eq!(visits(&l(&[], &[], 4)), vec![(4, 0)]);
        assert_eq!(visits(&l(&[1, 1], &[99, 0], 4)), vec![(4, 0)]);
    }

    #[test]
    fn overlapping_strides_visit_every_logical_element() {
        // A [3, 4] view with strides [1, 1] reaches elements 0..6, most of them twice.
        let layout = l(&[3, 4], &[1, 1], 0);
        assert_eq!(visits(&layout), gathered(&layout));
        assert_eq!(layout.walk().unwrap().walked(), 12);
    }

    proptest! {
        #[test]
        fn runs_visit_what_the_multi_index_reaches(
            dims in proptest::collection::vec((0u64..5, 0u64..9), 0..5),
            offset in 0u64..20,
        ) {
            let (sizes, strides): (Vec<u64>, Vec<u64>) = dims.into_iter().unzip();
            let layout = Layout::new(sizes, strides, offset).unwrap();
            let walk = layout.walk().unwrap();
            let visited = visits(&layout);
            prop_assert_eq!(&visited, &gathered(&layout));
            prop_assert_eq!(visited.len() as u64, walk.walked());
            prop_assert_eq!(walk.walked().saturating_mul(walk.repeat()), layout.numel());
        }
    }
}
