//! One tensor: contiguous views through the fast path in one pass, other views through their
//! layout's walk, contiguous runs still in bulk.

use super::fast::{scan_words, with_check, ElementScan, Flags};
use super::{scan_bytes, scannable, NonFinite};
use crate::layout::Walk;
use crate::tensor_impl::TensorImpl;

/// Scans a tensor's elements. Contiguous views go through [`scan_bytes`] on
/// [`TensorImpl::view_bytes`]; other views visit only the elements they reach (walking the
/// strides, `first` in logical row-major order; an element reached several times, as through a
/// broadcast dimension, counts each time). Memory used is proportional to the rank, never to
/// the element count.
///
/// `None` when the dtype is not [`scannable`], when the storage has no host bytes, or when the
/// view is inconsistent with its storage (see [`TensorImpl::is_data_ptr_consistent`]).
pub fn scan_tensor(imp: &TensorImpl) -> Option<NonFinite> {
    let dtype = imp.dtype();
    if !scannable(dtype) {
        return None;
    }
    if !imp.is_data_ptr_consistent() {
        return None;
    }
    let bytes = imp.view_bytes()?;
    let layout = imp.layout();
    if layout.numel() == 0 || dtype.element_size().is_none() {
        // Nothing to read, or a sub-byte dtype: no non-finite encodings.
        return Some(NonFinite::default());
    }
    if layout.is_contiguous() {
        return Some(scan_bytes(dtype, bytes));
    }
    let walk = layout.walk().ok()?;
    let storage = imp.storage().data_ptr().bytes()?;
    with_check(dtype, Strided { storage, walk }).unwrap_or(Some(NonFinite::default()))
}

/// A view's walk over its storage's bytes.
struct Strided<'a> {
    storage: &'a [u8],
    walk: Walk,
}

impl ElementScan for Strided<'_> {
    /// `None` when an element falls outside the storage.
    type Output = Option<NonFinite>;

    fn scan<const N: usize>(
        self,
        hit: impl Fn(&[u8; N]) -> bool + Copy,
        check: impl Fn(&[u8; N]) -> Flags + Copy,
    ) -> Option<NonFinite> {
        let (words, _partial) = self.storage.as_chunks::<N>();
        let mut out = NonFinite::default();
        for run in self.walk.runs() {
            let start = usize::try_from(run.start).ok()?;
            let len = usize::try_from(run.len).ok()?;
            let found = if run.is_contiguous() {
                scan_words(words.get(start..start.checked_add(len)?)?, hit, check)
            } else {
                let mut found = NonFinite::default();
                for j in 0..run.len {
                    let at = usize::try_from(run.element(j)?).ok()?;
                    let flags = check(words.get(at)?);
                    if flags.any() {
                        found.add(flags.class(), j);
                    }
                }
                found
            };
            // Runs come in logical order: the first run with a hit holds the first element.
            let first = match found.first {
                Some(j) => Some(run.logical_index(j)?),
                None => None,
            };
            out = out.merge(NonFinite { first, ..found }, 0);
        }
        Some(out.repeated(self.walk.repeat()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::numeric::classify_element;
    use crate::numeric::fast::tests::{scannable_dtype, special_bytes};
    use crate::tensor_impl::tests::{storage_of, view as view_of};
    use crate::{DataPtr, Device, Layout, Storage};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// Reference for a view: gathers every element by its multi-index, in row-major order.
    fn gather_reference(imp: &TensorImpl) -> NonFinite {
        let dtype = imp.dtype();
        let size = dtype.element_size().unwrap();
        let bytes = imp.storage().data_ptr().bytes().unwrap();
        let layout = imp.layout();
        let mut out = NonFinite::default();
        for logical in 0..layout.numel() {
            let mut rest = logical;
            let mut element = layout.storage_offset();
            for (&s, &stride) in layout.sizes().iter().zip(layout.strides()).rev() {
                element += (rest % s) * stride;
                rest /= s;
            }
            let at = (element * size) as usize;
            out.add(
                classify_element(dtype, &bytes[at..at + size as usize]),
                logical,
            );
        }
        out
    }

    fn f32_storage(values: &[f32]) -> Arc<Storage> {
        storage_of(
            DType::Float32,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
    }

    #[test]
    fn transposed_2x3_reports_the_logical_first() {
        // Storage row-major [[1, NaN, 3], [-Inf, 5, 6]]; its transpose is
        // [[1, -Inf], [NaN, 5], [3, 6]]: the first non-finite is -Inf at logical 1,
        // though NaN comes first in storage.
        let s = f32_storage(&[1.0, f32::NAN, 3.0, f32::NEG_INFINITY, 5.0, 6.0]);
        let t = view_of(&s, &[3, 2], &[1, 3], 0);
        assert!(!t.layout().is_contiguous());
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(
            scan,
            NonFinite {
                nan: 1,
                pos_inf: 0,
                neg_inf: 1,
                first: Some(1)
            }
        );
        assert_eq!(scan, gather_reference(&t));
        // The storage itself, contiguous: NaN first.
        let c = view_of(&s, &[2, 3], &[3, 1], 0);
        assert_eq!(scan_tensor(&c).unwrap().first, Some(1));
        assert_eq!(scan_tensor(&c).unwrap(), gather_reference(&c));
    }

    #[test]
    fn every_other_element_visits_only_what_it_reaches() {
        // numbers[1::2] of nine: reaches 1, 3, 5, 7 only.
        let mut values = [0.0f32; 9];
        values[0] = f32::NAN;
        values[2] = f32::INFINITY;
        values[5] = f32::NEG_INFINITY;
        values[7] = f32::NAN;
        values[8] = f32::NAN;
        let s = f32_storage(&values);
        let t = view_of(&s, &[4], &[2], 1);
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(
            scan,
            NonFinite {
                nan: 1,
                pos_inf: 0,
                neg_inf: 1,
                first: Some(2)
            }
        );
        assert_eq!(scan, gather_reference(&t));
    }

    #[test]
    fn broadcast_views_count_each_logical_element() {
        let s = f32_storage(&[1.0, f32::NAN, 2.0]);
        // expand a [3] to [1000, 3]: stride 0 outer.
        let t = view_of(&s, &[1000, 3], &[0, 1], 0);
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(scan.nan, 1000);
        assert_eq!(scan.first, Some(1));
        assert_eq!(scan, gather_reference(&t));
        // [3] as a column broadcast along a row of 5: [3, 5] strides [1, 0].
        let t = view_of(&s, &[3, 5], &[1, 0], 0);
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(scan, gather_reference(&t));
        assert_eq!(scan.first, Some(5));
        // A huge broadcast is not walked element by element.
        let t = view_of(&s, &[1 << 40, 1 << 20], &[0, 0], 1);
        let scan = scan_tensor(&t).unwrap();
        assert_eq!(scan.nan, 1 << 60);
        assert_eq!(scan.first, Some(0));
    }

    #[test]
    fn tensors_that_cannot_be_scanned() {
        // Not a float.
        let s = storage_of(DType::Int32, vec![0xff; 16]);
        assert_eq!(scan_tensor(&view_of(&s, &[4], &[1], 0)), None);
        // No host bytes.
        let meta = Arc::new(crate::testing::storage(
            0,
            "0",
            DType::Float32,
            16,
            "meta",
            DataPtr::none(Device::Meta),
        ));
        assert_eq!(scan_tensor(&view_of(&meta, &[4], &[1], 0)), None);
        // A view past its storage.
        let s = f32_storage(&[f32::NAN; 4]);
        assert_eq!(scan_tensor(&view_of(&s, &[4], &[1], 1)), None);
        assert_eq!(scan_tensor(&view_of(&s, &[3], &[2], 0)), None);
        // A tensor whose dtype disagrees with its storage.
        let t = TensorImpl::new(
            Layout::contiguous(vec![2]).unwrap(),
            DType::Float64,
            Device::Cpu,
            false,
            false,
            Arc::clone(&s),
        );
        assert_eq!(scan_tensor(&t), None);
        // Empty views and sub-byte dtypes are clean.
        assert_eq!(
            scan_tensor(&view_of(&s, &[0, 3], &[1, 7], 0)),
            Some(NonFinite::default())
        );
        let f4 = storage_of(DType::Float4E2m1fn, vec![0xff; 4]);
        assert_eq!(
            scan_tensor(&view_of(&f4, &[4], &[2], 0)),
            Some(NonFinite::default())
        );
    }

    #[test]
    fn three_dimensional_permutes_and_slices_match_the_gather() {
        // 4x5x6 float64 storage with specials sprinkled in.
        let values: Vec<u64> = (0..120u64)
            .map(|i| match i % 17 {
                3 => 0x7ff8_0000_0000_0000,
                11 => 0xfff0_0000_0000_0000,
                13 => 0x7ff0_0000_0000_0000,
                _ => (i as f64).to_bits(),
            })
            .collect();
        let s = storage_of(
            DType::Float64,
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        );
        let views: [(&[u64], &[u64], u64); 6] = [
            (&[6, 5, 4], &[1, 6, 30], 0),        // full permute
            (&[4, 6, 5], &[30, 1, 6], 0),        // transpose of last two
            (&[2, 5, 3], &[60, 6, 2], 1),        // slices with steps
            (&[4, 5], &[30, 6], 5),              // x[:, :, 5]
            (&[3, 1, 2, 6], &[36, 99, 6, 1], 0), // contiguous rows, odd outer
            (&[2, 2, 6], &[30, 6, 1], 36),       // contiguous rows, strided between
        ];
        for (sizes, strides, offset) in views {
            let t = view_of(&s, sizes, strides, offset);
            assert_eq!(
                scan_tensor(&t).unwrap(),
                gather_reference(&t),
                "{sizes:?} {strides:?} {offset}"
            );
        }
    }

    proptest! {
        #[test]
        fn random_strided_views_match_the_gather(
            dtype in proptest::sample::select(vec![
                DType::Float32, DType::Float16, DType::Float8E5m2, DType::Complex64, DType::Float64,
            ]),
            bytes in special_bytes(400..1600),
            dims in proptest::collection::vec((1u64..5, 0u64..9), 0..4),
            offset in 0u64..20,
        ) {
            let (sizes, strides): (Vec<u64>, Vec<u64>) = dims.into_iter().unzip();
            let s = storage_of(dtype, bytes);
            let layout = Layout::new(sizes, strides, offset).unwrap();
            let t = TensorImpl::new(layout, dtype, Device::Cpu, false, false, Arc::clone(&s));
            match scan_tensor(&t) {
                Some(scan) => prop_assert_eq!(scan, gather_reference(&t)),
                // Scannable, with host bytes: only a view past its storage is not scanned.
                None => {
                    let e = t.verify_data_ptr_consistency("t");
                    prop_assert!(
                        matches!(&e, Err(crate::Error::DataPtrInconsistent { tensor, detail })
                            if tensor == "t" && detail.starts_with("view reaches bytes")),
                        "{:?}", e
                    );
                    prop_assert!(!t.is_data_ptr_consistent());
                }
            }
        }

        #[test]
        fn arbitrary_views_never_panic(
            dtype in scannable_dtype(),
            bytes in special_bytes(0..64),
            dims in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..5),
            offset in any::<u64>(),
        ) {
            let (sizes, strides): (Vec<u64>, Vec<u64>) = dims.into_iter().unzip();
            let s = storage_of(dtype, bytes);
            if let Ok(layout) = Layout::new(sizes, strides, offset) {
                let t = TensorImpl::new(layout, dtype, Device::Cpu, false, false, s);
                let _ = scan_tensor(&t);
            }
        }
    }
}
