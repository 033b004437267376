//! Sizes, strides and storage offset: how a tensor reads its storage.

use crate::error::{Error, Result};
use crate::DType;
use smallvec::SmallVec;
use std::ops::Range;

mod walk;
pub use walk::{Run, Runs, Walk};

/// A strided view into a storage, counted in elements as PyTorch counts them.
///
/// Construction checks that every product and sum the layout implies fits in 64 bits,
/// so the accessors below never overflow.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    // Sizes, then strides, then the storage offset where it is not 0, inline up to two
    // dimensions at offset 0 or one at any offset (the weights, biases and views of flat
    // buffers that files of a million tensors are made of): no allocation per tensor, one
    // length for all three; more (a convolution's four dimensions, a slice of a matrix) take
    // one. Element count and extent are derived, not kept: a million layouts stay 40 bytes
    // each, and a `TensorImpl` fits a 64-byte block.
    dims: SmallVec<[u64; 4]>,
}

/// PyTorch's strides of a fresh tensor of `sizes` into `strides` (ones on entry; empty to
/// only check them), and its element count, with the errors [`Layout::new`] gives them: the
/// extent check is implied (with no size 0, the last element is at `numel - 1`).
fn contiguous_strides(sizes: &[u64], strides: &mut [u64]) -> Result<u64> {
    let mut stride = 1u64;
    for (i, &size) in sizes.iter().enumerate().skip(1).rev() {
        stride = stride
            .checked_mul(size.max(1))
            .ok_or_else(|| overflow("contiguous strides"))?;
        if let Some(slot) = strides.get_mut(i - 1) {
            *slot = stride;
        }
    }
    sizes
        .iter()
        .try_fold(1u64, |acc, &s| acc.checked_mul(s))
        .ok_or_else(|| overflow("element count"))
}

// A call, not the value: an `Error` made and dropped on every success cost more than the
// arithmetic.
fn overflow(what: &'static str) -> Error {
    Error::Overflow { what }
}

/// Sizes or strides of one layout.
pub type Dims = SmallVec<[u64; 4]>;

impl Layout {
    /// A layout from explicit sizes, strides and offset.
    pub fn new(
        sizes: impl AsRef<[u64]>,
        strides: impl AsRef<[u64]>,
        storage_offset: u64,
    ) -> Result<Self> {
        let (sizes, strides) = (sizes.as_ref(), strides.as_ref());
        if sizes.len() != strides.len() {
            return Err(Error::RankMismatch {
                sizes: sizes.len(),
                strides: strides.len(),
            });
        }
        // Checked here once, so that the derived counts below never overflow.
        let numel = sizes
            .iter()
            .try_fold(1u64, |acc, &s| acc.checked_mul(s))
            .ok_or(Error::Overflow {
                what: "element count",
            })?;
        if numel > 0 {
            let overflow = || Error::Overflow {
                what: "view extent",
            };
            let last = sizes
                .iter()
                .zip(strides)
                .try_fold(storage_offset, |acc, (&size, &stride)| {
                    (size - 1).checked_mul(stride)?.checked_add(acc)
                })
                .ok_or_else(overflow)?;
            last.checked_add(1).ok_or_else(overflow)?;
        }
        // The layouts of nearly every tensor written straight into the inline array.
        let dims = match (sizes, strides, storage_offset) {
            (&[size], &[stride], 0) => SmallVec::from_buf_and_len([size, stride, 0, 0], 2),
            (&[size], &[stride], at) => SmallVec::from_buf_and_len([size, stride, at, 0], 3),
            (&[s0, s1], &[t0, t1], 0) => SmallVec::from_buf([s0, s1, t0, t1]),
            _ => sizes
                .iter()
                .chain(strides)
                .copied()
                .chain((storage_offset != 0).then_some(storage_offset))
                .collect(),
        };
        Ok(Layout { dims })
    }

    /// A C-contiguous layout at offset 0, with the strides PyTorch gives a fresh tensor
    /// (size-0 dimensions count as 1 when striding).
    ///
    /// Built in place, as [`Layout::new`] would build it from these strides with the same
    /// errors: its extent check is implied (with no size 0, the last element is at
    /// `numel - 1`), and a million tensors are built this way.
    pub fn contiguous(sizes: impl AsRef<[u64]>) -> Result<Self> {
        let sizes = sizes.as_ref();
        let rank = sizes.len();
        let mut dims: SmallVec<[u64; 4]> = smallvec::smallvec![1u64; 2 * rank];
        let (head, strides) = dims.split_at_mut(rank);
        head.copy_from_slice(sizes);
        contiguous_strides(sizes, strides)?;
        Ok(Layout { dims })
    }

    /// The element count of [`Layout::contiguous`]`(sizes)`, or its error, without building it.
    pub fn contiguous_numel(sizes: &[u64]) -> Result<u64> {
        contiguous_strides(sizes, &mut [])
    }

    /// Sizes per dimension.
    pub fn sizes(&self) -> &[u64] {
        self.parts().0
    }

    /// Strides per dimension, in elements.
    pub fn strides(&self) -> &[u64] {
        self.parts().1
    }

    /// Offset of the first element into the storage, in elements.
    pub fn storage_offset(&self) -> u64 {
        self.parts().2
    }

    /// Sizes, strides and offset: the rank is half the length, rounded down (an odd length
    /// holds an offset).
    fn parts(&self) -> (&[u64], &[u64], u64) {
        let (sizes, rest) = self.dims.split_at(self.dims.len() / 2);
        let (strides, offset) = rest.split_at(sizes.len());
        (sizes, strides, offset.first().copied().unwrap_or(0))
    }

    /// Number of elements.
    pub fn numel(&self) -> u64 {
        // Construction checked the product: saturating never changes it.
        self.sizes().iter().fold(1, |acc, &s| acc.saturating_mul(s))
    }

    /// PyTorch's `is_contiguous()`: C order, ignoring size-1 dimensions; empty tensors are contiguous.
    pub fn is_contiguous(&self) -> bool {
        if self.numel() == 0 {
            return true;
        }
        let mut expected = 1u64;
        for (&size, &stride) in self.sizes().iter().zip(self.strides()).rev() {
            if size == 1 {
                continue;
            }
            if stride != expected {
                return false;
            }
            // Bounded by numel, which fitted.
            expected = expected.saturating_mul(size);
        }
        true
    }

    /// Element indices the view touches: lowest, and one past the highest. `None` when empty.
    pub fn element_range(&self) -> Option<Range<u64>> {
        // The element count is 0 exactly when a size is: one pass, where counting the
        // elements first took two.
        let (sizes, strides, offset) = self.parts();
        let mut last = offset;
        for (&size, &stride) in sizes.iter().zip(strides) {
            // One past the highest index reached is checked by construction.
            last = size
                .checked_sub(1)?
                .saturating_mul(stride)
                .saturating_add(last);
        }
        Some(offset..last.saturating_add(1))
    }

    /// Bytes of the storage the view touches, `None` when it touches none.
    /// Sub-byte and packed dtypes ([`DType::packed_bits`]) round the end up to the byte
    /// holding the last bit.
    pub fn byte_range(&self, dtype: DType) -> Result<Option<Range<u64>>> {
        let Some(range) = self.element_range() else {
            return Ok(None);
        };
        let overflow = || Error::Overflow {
            what: "view byte extent",
        };
        let bits = dtype.packed_bits();
        let start = range.start.checked_mul(bits).ok_or_else(overflow)? / 8;
        let end = range
            .end
            .checked_mul(bits)
            .ok_or_else(overflow)?
            .div_ceil(8);
        Ok(Some(start..end))
    }

    /// Bytes the elements themselves occupy (numel × element width), whatever the strides.
    pub fn nbytes(&self, dtype: DType) -> Result<u64> {
        let bits = self
            .numel()
            .checked_mul(dtype.bits())
            .ok_or(Error::Overflow {
                what: "tensor byte size",
            })?;
        Ok(bits.div_ceil(8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(super) fn l(sizes: &[u64], strides: &[u64], off: u64) -> Layout {
        Layout::new(sizes, strides, off).expect("valid layout")
    }

    #[test]
    fn contiguous_strides_follow_pytorch() {
        assert_eq!(
            Layout::contiguous(vec![2, 3, 4]).unwrap().strides(),
            &[12, 4, 1]
        );
        assert_eq!(Layout::contiguous(vec![2, 0]).unwrap().strides(), &[1, 1]);
        assert_eq!(Layout::contiguous(vec![0, 3]).unwrap().strides(), &[3, 1]);
        assert!(Layout::contiguous(vec![]).unwrap().strides().is_empty());
        assert_eq!(Layout::contiguous(vec![]).unwrap().numel(), 1);
    }

    proptest::proptest! {
        /// Built in place, a contiguous layout is what `Layout::new` builds from PyTorch's
        /// strides, or the same error: sizes near 2^64 and zeros included.
        #[test]
        fn contiguous_is_new_with_pytorchs_strides(
            sizes in proptest::collection::vec(
                proptest::prop_oneof![0u64..4, 1u64 << 20..1 << 22, (1u64 << 62)..u64::MAX],
                0..6,
            )
        ) {
            let mut strides = vec![1u64; sizes.len()];
            let mut expected = Ok(());
            for i in (1..sizes.len()).rev() {
                match strides[i].checked_mul(sizes[i].max(1)) {
                    Some(stride) => strides[i - 1] = stride,
                    None => {
                        expected = Err(Error::Overflow { what: "contiguous strides" });
                        break;
                    }
                }
            }
            let expected = expected.and_then(|()| Layout::new(&sizes, &strides, 0));
            let got = Layout::contiguous(&sizes);
            proptest::prop_assert_eq!(format!("{got:?}"), format!("{expected:?}"));
            let numel = Layout::contiguous_numel(&sizes);
            proptest::prop_assert_eq!(
                format!("{numel:?}"),
                format!("{:?}", expected.map(|l| l.numel()))
            );
        }
    }

    #[test]
    fn contiguity_ignores_size_one_dims() {
        assert!(l(&[3, 1], &[1, 1], 2).is_contiguous());
        assert!(l(&[1, 4], &[99, 1], 0).is_contiguous());
        assert!(!l(&[3, 2], &[1, 3], 0).is_contiguous()); // a transpose
        assert!(!l(&[4], &[2], 1).is_contiguous()); // every other element
        assert!(l(&[0, 5], &[7, 3], 0).is_contiguous()); // empty
    }

    #[test]
    fn extents_of_views_over_one_storage() {
        // numbers[1::2] of a 9-element storage reaches elements 1..8.
        assert_eq!(l(&[4], &[2], 1).element_range(), Some(1..8));
        assert_eq!(
            l(&[4], &[2], 1).byte_range(DType::Float64).unwrap(),
            Some(8..64)
        );
        // A transposed 2x3 reaches all six.
        assert_eq!(l(&[3, 2], &[1, 3], 0).element_range(), Some(0..6));
        assert_eq!(l(&[0], &[1], 5).byte_range(DType::Float32).unwrap(), None);
        // Broadcast (stride 0) touches one element.
        assert_eq!(l(&[1000], &[0], 3).element_range(), Some(3..4));
        // Sub-byte: three 6-bit values need 18 bits, so 3 bytes.
        assert_eq!(
            l(&[3], &[1], 0).byte_range(DType::Float6E2m3fn).unwrap(),
            Some(0..3)
        );
        assert_eq!(l(&[3], &[1], 0).nbytes(DType::Float6E2m3fn).unwrap(), 3);
        // Packed quantized: a [3, 5] quint4x2 reaches 15 nibbles, 8 bytes (its storage holds 9,
        // each row rounded up), though PyTorch's nbytes counts a byte per element.
        let packed = l(&[3, 5], &[5, 1], 0);
        assert_eq!(packed.byte_range(DType::QUInt4x2).unwrap(), Some(0..8));
        assert_eq!(packed.byte_range(DType::QUInt2x4).unwrap(), Some(0..4));
        assert_eq!(packed.nbytes(DType::QUInt4x2).unwrap(), 15);
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        assert!(matches!(
            Layout::new(vec![u64::MAX, 2], vec![1, 1], 0),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            Layout::new(vec![2], vec![u64::MAX], 1),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            Layout::new(vec![1], vec![1], u64::MAX),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            Layout::contiguous(vec![1 << 40, 1 << 40]),
            Err(Error::Overflow { .. })
        ));
        let big = l(&[1 << 62], &[1], 0);
        assert!(matches!(
            big.nbytes(DType::Float64),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            big.byte_range(DType::Float64),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            Layout::new(vec![2, 2], vec![1], 0),
            Err(Error::RankMismatch {
                sizes: 2,
                strides: 1
            })
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_layouts_never_panic(
            dims in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..6),
            off in prop_oneof![Just(0u64), 0u64..16, any::<u64>()],
        ) {
            let (sizes, strides): (Vec<u64>, Vec<u64>) = dims.into_iter().unzip();
            if let Ok(layout) = Layout::new(&sizes, &strides, off) {
                prop_assert_eq!((layout.sizes(), layout.strides()), (&sizes[..], &strides[..]));
                prop_assert_eq!(layout.storage_offset(), off);
                let _ = layout.is_contiguous();
                let _ = layout.byte_range(DType::Complex128);
                let _ = layout.nbytes(DType::Float4E2m1fn);
                let walk = layout.walk().expect("a valid layout has a walk");
                let _ = walk.walked();
                for run in walk.runs().take(64) {
                    let last = run.len.saturating_sub(1);
                    let _ = (run.element(last), run.logical_index(last));
                    prop_assert!(run.element(run.len).is_none());
                }
            }
        }

        #[test]
        fn contiguous_layouts_cover_exactly_numel_elements(
            sizes in proptest::collection::vec(0u64..6, 0..5),
        ) {
            let layout = Layout::contiguous(sizes).unwrap();
            prop_assert!(layout.is_contiguous());
            match layout.element_range() {
                Some(r) => prop_assert_eq!(r.end - r.start, layout.numel()),
                None => prop_assert_eq!(layout.numel(), 0),
            }
        }
    }
}
