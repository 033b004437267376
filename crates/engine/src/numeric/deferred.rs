//! Storages left compressed in the file (a deflated zip record, [`Owner::Deferred`]): the
//! record is inflated once, in fixed-size pieces, and every view of the storage is scanned as
//! the pieces go by. Memory is one piece and a partial element per view, whatever the
//! record's size; the mapped pages of the compressed record are released once read through.
//!
//! Pieces arrive in storage order, so each view reads its byte range front to back: an element
//! cut by a piece boundary is carried over to the next piece. A contiguous view counts as the
//! fast path does. A strided view whose elements are each reached from one position (no two
//! positions share a storage element, as for permutes and slices) classifies what its range
//! holds and, for each non-finite element, works out whether the view reaches it and at which
//! logical index from the strides: the same counts and first index as walking it. A view whose
//! positions overlap (only a crafted file has one) is scanned over its distinct bytes, each
//! element once, with no first index, as [`scan_checkpoint`](super::scan_checkpoint) does for
//! views that reach their elements many times.

use super::{classify_element, scan_bytes, scannable, Class, NonFinite};
use crate::data_ptr::Owner;
use crate::inflate::{chunks as inflate_chunks, release_read};
use crate::tensor_impl::TensorImpl;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Scans `views` (each with its index in the checkpoint) of one deferred storage, inflating
/// it in pieces of `chunk` bytes. A view is left out where [`scan_tensor`](super::scan_tensor)
/// would give `None` on the inflated bytes, and every view is left out when the record does
/// not inflate to its declared size (the read checked that it does).
pub(super) fn scan_deferred(
    views: &[(usize, &TensorImpl)],
    chunk: usize,
    progress: Option<&AtomicU64>,
) -> Vec<(usize, NonFinite)> {
    let mut done = Vec::new();
    let mut streaming = Vec::new();
    for &(index, imp) in views {
        match View::start(imp) {
            Some(Start::Done(found)) => done.push((index, found)),
            Some(Start::Stream(view)) => streaming.push((index, view)),
            None => {}
        }
    }
    let Some(&(_, first)) = views.first() else {
        return done;
    };
    if streaming.is_empty() {
        return done;
    }
    let Owner::Deferred(deferred) = first.storage().data_ptr().owner() else {
        return done;
    };
    let (buffer, compressed, len) = (&deferred.buffer, &deferred.compressed, &deferred.len);
    let bytes = usize::try_from(compressed.start)
        .ok()
        .zip(usize::try_from(compressed.end).ok())
        .and_then(|(start, end)| buffer.bytes().get(start..end));
    let Some(bytes) = bytes else {
        return done;
    };
    let mut released = compressed.start;
    let mut counted = 0u64;
    let inflated = inflate_chunks(bytes, *len, chunk, |at, piece, consumed| {
        released = release_read(buffer, released, compressed.start.saturating_add(consumed));
        // Progress counts bytes of the file, so a deflated record counts what it weighs there.
        if let Some(counter) = progress {
            counter.fetch_add(consumed.saturating_sub(counted), Ordering::Relaxed);
            counted = consumed;
        }
        for (_, view) in &mut streaming {
            view.feed(at, piece);
        }
    });
    if inflated.is_ok() {
        done.extend(
            streaming
                .into_iter()
                .filter_map(|(index, view)| Some((index, view.finish()?))),
        );
    }
    done
}

/// A view before the stream: answered already, or waiting for its bytes.
enum Start {
    Done(NonFinite),
    Stream(View),
}

/// How a view's elements map to logical indices.
enum Plan {
    /// Row-major from the start of the range.
    Contiguous,
    /// Each storage element reached from at most one position.
    Strided(Positions),
    /// Positions overlap: distinct elements, once each, no first index.
    Distinct,
}

/// One view's scan as the pieces go by.
struct View {
    dtype: crate::DType,
    /// Element width in bytes.
    width: u64,
    /// The storage bytes the view reaches.
    range: Range<u64>,
    plan: Plan,
    /// Storage byte where the next whole element (or `carry`) begins.
    pos: u64,
    /// The start of an element cut by a piece boundary (fewer than `width` bytes).
    carry: Vec<u8>,
    found: NonFinite,
}

impl View {
    /// `None` where the stored path gives `None`: not scannable, or inconsistent with its
    /// storage.
    fn start(imp: &TensorImpl) -> Option<Start> {
        let dtype = imp.dtype();
        if !scannable(dtype) {
            return None;
        }
        if !imp.is_data_ptr_consistent() {
            return None;
        }
        let layout = imp.layout();
        let (Some(width), Some(range)) = (dtype.element_size(), imp.byte_range().ok()?) else {
            // Nothing to read, or a sub-byte dtype: no non-finite encodings.
            return Some(Start::Done(NonFinite::default()));
        };
        if layout.numel() == 0 || width == 0 {
            return Some(Start::Done(NonFinite::default()));
        }
        let plan = if layout.is_contiguous() {
            Plan::Contiguous
        } else {
            match Positions::new(layout.sizes(), layout.strides(), layout.storage_offset()) {
                Some(p) => Plan::Strided(p),
                None => Plan::Distinct,
            }
        };
        Some(Start::Stream(View {
            dtype,
            width,
            pos: range.start,
            range,
            plan,
            carry: Vec::new(),
            found: NonFinite::default(),
        }))
    }

    /// Takes what `piece` (storage bytes from `at`) holds of the range.
    fn feed(&mut self, at: u64, piece: &[u8]) {
        let piece_end = at.saturating_add(piece.len() as u64);
        let start = self
            .pos
            .saturating_add(self.carry.len() as u64)
            .max(at)
            .max(self.range.start);
        let end = piece_end.min(self.range.end);
        let slice = usize::try_from(start - at.min(start))
            .ok()
            .zip(usize::try_from(end.saturating_sub(at)).ok())
            .and_then(|(s, e)| piece.get(s..e));
        let Some(mut bytes) = slice.filter(|_| start < end) else {
            return;
        };
        let width = usize::try_from(self.width).unwrap_or(usize::MAX);
        if !self.carry.is_empty() {
            let take = width.saturating_sub(self.carry.len()).min(bytes.len());
            let (head, rest) = bytes.split_at(take);
            self.carry.extend_from_slice(head);
            bytes = rest;
            if self.carry.len() < width {
                return;
            }
            let element = std::mem::take(&mut self.carry);
            self.elements(&element);
        }
        let whole = bytes.len() / width * width;
        let (elements, rest) = bytes.split_at(whole);
        if !elements.is_empty() {
            self.elements(elements);
        }
        self.carry.extend_from_slice(rest);
    }

    /// Whole elements beginning at storage byte `self.pos`; advances it past them.
    fn elements(&mut self, bytes: &[u8]) {
        let found = scan_bytes(self.dtype, bytes);
        let at = self.pos;
        self.pos = at.saturating_add(bytes.len() as u64);
        match &self.plan {
            Plan::Contiguous => {
                let before = (at - self.range.start) / self.width;
                self.found = self.found.merge(found, before);
            }
            Plan::Distinct => {
                self.found = self.found.merge(
                    NonFinite {
                        first: None,
                        ..found
                    },
                    0,
                );
            }
            Plan::Strided(positions) => {
                if found.is_clean() {
                    return;
                }
                let width = usize::try_from(self.width).unwrap_or(usize::MAX);
                for (k, element) in bytes.chunks_exact(width).enumerate() {
                    let class = classify_element(self.dtype, element);
                    if class == Class::Finite {
                        continue;
                    }
                    let storage_index = at / self.width + k as u64;
                    if let Some(logical) = positions.logical(storage_index) {
                        add(&mut self.found, class, positions.repeat, logical);
                    }
                }
            }
        }
    }

    /// The counts, once the range has been read to its end.
    fn finish(self) -> Option<NonFinite> {
        (self.carry.is_empty() && self.pos == self.range.end).then_some(self.found)
    }
}

/// Counts `class` `times` more, first reached at logical index `logical`.
fn add(found: &mut NonFinite, class: Class, times: u64, logical: u64) {
    let count = match class {
        Class::Finite => return,
        Class::Nan => &mut found.nan,
        Class::PosInf => &mut found.pos_inf,
        Class::NegInf => &mut found.neg_inf,
    };
    *count = count.saturating_add(times);
    found.first = Some(found.first.map_or(logical, |f| f.min(logical)));
}

/// A layout whose positions each reach their own storage element: its walked dimensions by
/// decreasing stride, so a storage index decomposes into one position, greedily.
struct Positions {
    offset: u64,
    /// (size, storage stride, logical stride), largest stride first.
    dims: Vec<(u64, u64, u64)>,
    /// Times each reached element repeats through broadcast dimensions.
    repeat: u64,
}

impl Positions {
    /// `None` when two positions may share an element (the dimensions overlap).
    fn new(sizes: &[u64], strides: &[u64], offset: u64) -> Option<Positions> {
        let mut logical = vec![0u64; sizes.len()];
        let mut acc = 1u64;
        for (l, &size) in logical.iter_mut().zip(sizes).rev() {
            *l = acc;
            acc = acc.checked_mul(size)?;
        }
        let mut repeat = 1u64;
        let mut dims = Vec::with_capacity(sizes.len());
        for ((&size, &stride), &logical) in sizes.iter().zip(strides).zip(&logical) {
            match (size, stride) {
                (1, _) => {}
                (_, 0) => repeat = repeat.checked_mul(size)?,
                _ => dims.push((size, stride, logical)),
            }
        }
        // Each stride must pass the farthest reach of all smaller ones together: then the
        // positions are distinct, and the greedy decomposition finds the only one.
        dims.sort_unstable_by_key(|&(_, stride, _)| stride);
        let mut reach = 0u64;
        for &(size, stride, _) in &dims {
            if stride <= reach {
                return None;
            }
            reach = reach.checked_add((size - 1).checked_mul(stride)?)?;
        }
        dims.reverse();
        Some(Positions {
            offset,
            dims,
            repeat,
        })
    }

    /// The logical index of the position that reaches storage element `index`, if one does.
    fn logical(&self, index: u64) -> Option<u64> {
        let mut rest = index.checked_sub(self.offset)?;
        let mut logical = 0u64;
        for &(size, stride, step) in &self.dims {
            let i = rest / stride;
            if i >= size {
                return None;
            }
            rest -= i * stride;
            logical = logical.checked_add(i.checked_mul(step)?)?;
        }
        (rest == 0).then_some(logical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numeric::fast::tests::special_bytes;
    use crate::numeric::scan_tensor;
    use crate::tensor_impl::tests::storage_of;
    use crate::{DType, DataPtr, Device, HostBuffer, Layout, Storage};
    use proptest::prelude::*;
    use std::io::Write;
    use std::sync::Arc;

    /// The same bytes twice: held on the heap, and deflated and deferred.
    fn both(dtype: DType, bytes: &[u8]) -> (Arc<Storage>, Arc<Storage>) {
        let mut enc =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(bytes).unwrap();
        let compressed = enc.finish().unwrap();
        let end = compressed.len() as u64;
        let buffer = HostBuffer::from_vec("deflated.pt", compressed);
        let n = bytes.len() as u64;
        let ptr = DataPtr::deferred(buffer, 0..end, n);
        let deferred = Arc::new(crate::testing::storage(0, "0", dtype, n, "cpu", ptr));
        (storage_of(dtype, bytes.to_vec()), deferred)
    }

    fn view(
        s: &Arc<Storage>,
        dtype: DType,
        sizes: &[u64],
        strides: &[u64],
        offset: u64,
    ) -> Option<TensorImpl> {
        let layout = Layout::new(sizes, strides, offset).ok()?;
        Some(TensorImpl::new(
            layout,
            dtype,
            Device::Cpu,
            false,
            false,
            Arc::clone(s),
        ))
    }

    fn streamed(imp: &TensorImpl, chunk: usize) -> Option<NonFinite> {
        scan_deferred(&[(0, imp)], chunk, None)
            .first()
            .map(|&(_, f)| f)
    }

    fn f32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn values_cut_by_piece_boundaries_are_read_whole() {
        // Pieces of 3 bytes cut every float32 but one in four.
        let mut values = vec![1.0f32; 40];
        values[7] = f32::NAN;
        values[21] = f32::NEG_INFINITY;
        values[39] = f32::INFINITY;
        let (held, deferred) = both(DType::Float32, &f32s(&values));
        for chunk in [1, 3, 4, 5, 7, 160, 1 << 20] {
            for (sizes, strides, offset) in [
                (&[40][..], &[1][..], 0),
                (&[30][..], &[1][..], 9),
                (&[5, 8][..], &[1, 5][..], 0),
                (&[13][..], &[3][..], 0),
            ] {
                let h = view(&held, DType::Float32, sizes, strides, offset).unwrap();
                let d = view(&deferred, DType::Float32, sizes, strides, offset).unwrap();
                assert_eq!(
                    streamed(&d, chunk),
                    scan_tensor(&h),
                    "{chunk} {sizes:?} {strides:?}"
                );
            }
        }
        let d = view(&deferred, DType::Float32, &[40], &[1], 0).unwrap();
        // Progress counts the record as it weighs in the file, once for all its views.
        let progress = AtomicU64::new(0);
        let t = view(&deferred, DType::Float32, &[5, 8], &[1, 5], 0).unwrap();
        assert_eq!(
            scan_deferred(&[(0, &d), (1, &t)], 7, Some(&progress)).len(),
            2
        );
        let Owner::Deferred(record) = deferred.data_ptr().owner() else {
            panic!("deferred")
        };
        assert_eq!(
            progress.load(Ordering::Relaxed),
            record.compressed.end - record.compressed.start
        );
        let found = streamed(&d, 3).unwrap();
        assert_eq!(
            (found.nan, found.neg_inf, found.pos_inf, found.first),
            (1, 1, 1, Some(7))
        );
    }

    #[test]
    fn a_record_of_the_wrong_size_scans_nothing() {
        let bytes = f32s(&[f32::NAN; 8]);
        let (_, deferred) = both(DType::Float32, &bytes);
        let Owner::Deferred(record) = deferred.data_ptr().owner() else {
            panic!("deferred")
        };
        for claimed in [28u64, 36] {
            let ptr = DataPtr::deferred(
                Arc::clone(&record.buffer),
                record.compressed.clone(),
                claimed,
            );
            let s = Arc::new(crate::testing::storage(
                0,
                "0",
                DType::Float32,
                claimed,
                "cpu",
                ptr,
            ));
            let v = view(&s, DType::Float32, &[7], &[1], 0).unwrap();
            assert_eq!(streamed(&v, 5), None, "{claimed}");
        }
    }

    #[test]
    fn overlapping_positions_count_distinct_elements_once() {
        let (_, deferred) = both(DType::Float32, &f32s(&[0.0, f32::NAN, 2.0, 3.0]));
        // [2, 3] with strides [1, 1]: positions (0, 1) and (1, 0) share element 1.
        let v = view(&deferred, DType::Float32, &[2, 3], &[1, 1], 0).unwrap();
        let found = streamed(&v, 2).unwrap();
        assert_eq!((found.nan, found.first), (1, None));
    }

    proptest! {
        #[test]
        fn streamed_views_match_the_held_scan(
            dtype in proptest::sample::select(vec![
                DType::Float32, DType::Float16, DType::Float8E5m2, DType::Complex64, DType::Float64,
            ]),
            bytes in special_bytes(400..1600),
            dims in proptest::collection::vec((1u64..5, 0u64..9), 0..4),
            offset in 0u64..20,
            chunk in 1usize..64,
        ) {
            let (sizes, strides): (Vec<u64>, Vec<u64>) = dims.into_iter().unzip();
            let (held, deferred) = both(dtype, &bytes);
            if let (Some(h), Some(d)) = (
                view(&held, dtype, &sizes, &strides, offset),
                view(&deferred, dtype, &sizes, &strides, offset),
            ) {
                let overlap = !d.layout().is_contiguous()
                    && Positions::new(&sizes, &strides, offset).is_none();
                let stored = scan_tensor(&h);
                let streamed = streamed(&d, chunk);
                if overlap && stored.is_some() {
                    // The distinct bytes of its range, each element once, no first index.
                    let range = h.byte_range().unwrap().unwrap();
                    let distinct = scan_bytes(dtype, &bytes[range.start as usize..range.end as usize]);
                    prop_assert_eq!(streamed, Some(NonFinite { first: None, ..distinct }));
                } else {
                    prop_assert_eq!(streamed, stored);
                }
            }
        }
    }
}
