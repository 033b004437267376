//! A whole checkpoint: every floating tensor scanned once, in parallel over tensors and over
//! chunks of large contiguous ones, with the pages of a mapped file released once scanned;
//! storages left compressed in the file are inflated piece by piece, once each.

use super::deferred::scan_deferred;
use super::{scaled_blocks, scan_block_scales, scan_bytes, scan_tensor, scannable, NonFinite};
use crate::data_ptr::Owner;
use crate::inflate::INFLATE_CHUNK;
use crate::storage::Storage;
use crate::tensor_impl::TensorImpl;
use crate::Checkpoint;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of a contiguous tensor scanned as one unit of parallel work. A multiple of every
/// element size, so chunks split no element.
const CHUNK_BYTES: u64 = 8 << 20;

/// A release is a system call: worth it for chunks at least this large, not for every small
/// tensor.
const RELEASE_MIN: u64 = 256 << 10;

/// Scans every [`scannable`] tensor of `ckpt`, keyed by its index in `ckpt.tensors`.
///
/// Large contiguous tensors are split into 8 MiB chunks; tensors and chunks are scanned in
/// parallel and each tensor's chunks merged in order, so the counts and first index are those
/// of one pass over the tensor. The mapped pages of each scanned chunk are released, so
/// resident memory stays bounded whatever the checkpoint's size. `progress`, when given, is
/// advanced by the bytes of each contiguous chunk scanned.
///
/// A tensor is missing from the map when [`scan_tensor`] would give `None` (no bytes, or a
/// view inconsistent with its storage). A storage left compressed in the file is inflated in
/// `INFLATE_CHUNK` pieces and its views scanned as the pieces pass, with the same counts and
/// first index as on held bytes. A view that reaches its elements many times over
/// without broadcasting (only a crafted file has one) is scanned over its distinct bytes,
/// each element once, with no first index: walking it would cost its logical element count.
pub fn scan_checkpoint(
    ckpt: &Checkpoint,
    progress: Option<&AtomicU64>,
) -> HashMap<usize, NonFinite> {
    scan_checkpoint_where(ckpt, progress, &|_| true)
}

/// [`scan_checkpoint`] over the tensors whose storage `keep` accepts only: a partitioned
/// audit scans the shards of a set it was given and leaves the others' bytes unread.
pub fn scan_checkpoint_where(
    ckpt: &Checkpoint,
    progress: Option<&AtomicU64>,
    keep: &(dyn Fn(&Storage) -> bool + Sync),
) -> HashMap<usize, NonFinite> {
    // Views of a storage left compressed in the file are scanned together, as one stream of
    // its inflated bytes (`deferred.rs`); the others by chunks of their held bytes.
    let mut deferred: HashMap<*const Storage, Vec<(usize, &TensorImpl)>> = HashMap::new();
    let mut work: Vec<(usize, u64)> = Vec::new();
    for (i, t) in ckpt.tensors.iter().enumerate() {
        let imp = t.tensor_impl();
        if !scannable(imp.dtype()) || !keep(imp.storage()) {
            continue;
        }
        if matches!(imp.storage().data_ptr().owner(), Owner::Deferred(_)) {
            deferred
                .entry(Arc::as_ptr(imp.storage()))
                .or_default()
                .push((i, imp));
        } else {
            work.extend((0..chunks(imp)).map(|c| (i, c)));
        }
    }
    let deferred: Vec<Vec<(usize, &TensorImpl)>> = deferred.into_values().collect();
    let streamed: Vec<(usize, NonFinite)> = deferred
        .par_iter()
        .flat_map_iter(|views| scan_deferred(views, INFLATE_CHUNK, progress))
        .collect();
    // An indexed parallel collect keeps the work's order: each tensor's chunks in sequence.
    let found: Vec<Option<NonFinite>> = work
        .par_iter()
        .map(|&(i, chunk)| {
            let imp = ckpt.tensors.get(i)?.tensor_impl();
            if imp.layout().is_contiguous() {
                scan_chunk(imp, chunk, progress)
            } else {
                scan_strided(imp)
            }
        })
        .collect();
    let mut merged: HashMap<usize, NonFinite> = HashMap::new();
    for (&(i, chunk), found) in work.iter().zip(found) {
        let (Some(found), Some(t)) = (found, ckpt.tensors.get(i)) else {
            continue;
        };
        let offset = elements_before(t.tensor_impl(), chunk);
        let total = merged.entry(i).or_default();
        *total = total.merge(found, offset);
    }
    merged.extend(streamed);
    // Quantised blocks are uint8, never scannable above: their scales, keyed by the blocks'
    // tensor like a float tensor's elements.
    let scaled: Vec<(usize, NonFinite)> = scaled_blocks(ckpt)
        .par_iter()
        .filter_map(|&(i, scales)| {
            let imp = ckpt.tensors.get(i)?.tensor_impl();
            if !keep(imp.storage()) {
                return None;
            }
            let found = scan_block_scales(imp, scales)?;
            if let Some(counter) = progress {
                counter.fetch_add(imp.nbytes().unwrap_or(0), Ordering::Relaxed);
            }
            Some((i, found))
        })
        .collect();
    merged.extend(scaled);
    merged
}

/// Units of work for one tensor: its chunks when contiguous, else one.
fn chunks(imp: &TensorImpl) -> u64 {
    if imp.layout().is_contiguous() {
        imp.nbytes().unwrap_or(0).div_ceil(CHUNK_BYTES).max(1)
    } else {
        1
    }
}

/// Logical index of the first element of chunk `chunk` (0 for a tensor scanned whole).
fn elements_before(imp: &TensorImpl, chunk: u64) -> u64 {
    let bits = imp.dtype().bits().max(1);
    chunk
        .checked_mul(CHUNK_BYTES)
        .and_then(|bytes| bytes.checked_mul(8))
        .map_or(u64::MAX, |b| b / bits)
}

/// Chunk `chunk` of a contiguous tensor; its pages are released afterwards.
fn scan_chunk(imp: &TensorImpl, chunk: u64, progress: Option<&AtomicU64>) -> Option<NonFinite> {
    if !imp.is_data_ptr_consistent() {
        return None;
    }
    let bytes = imp.view_bytes()?;
    let start = chunk.checked_mul(CHUNK_BYTES)?;
    let end = start.saturating_add(CHUNK_BYTES).min(bytes.len() as u64);
    let part = bytes.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)?;
    // The chunk as bytes of its storage, where the view has a byte range (an empty view has
    // none, and is still scanned): mapped in before the scan, released after it.
    let stored = imp
        .byte_range()
        .ok()
        .flatten()
        .and_then(|view| Some(view.start.checked_add(start)?..view.start.checked_add(end)?));
    let data_ptr = imp.storage().data_ptr();
    if let Some(stored) = &stored {
        data_ptr.read_ahead(stored.clone());
    }
    let found = scan_bytes(imp.dtype(), part);
    let len = part.len() as u64;
    if let Some(stored) = stored.filter(|_| len >= RELEASE_MIN) {
        data_ptr.release_scanned(stored);
    }
    if let Some(counter) = progress {
        counter.fetch_add(len, Ordering::Relaxed);
    }
    Some(found)
}

/// A non-contiguous view through [`scan_tensor`]; but when, broadcasts aside, it reaches more
/// elements than its byte range holds, its distinct bytes instead (see [`scan_checkpoint`]).
fn scan_strided(imp: &TensorImpl) -> Option<NonFinite> {
    let range = imp.byte_range().ok()??;
    let distinct =
        range.end.checked_sub(range.start)?.saturating_mul(8) / imp.dtype().bits().max(1);
    let walked = imp.layout().walk().ok()?.walked();
    if walked > distinct && imp.is_data_ptr_consistent() {
        let bytes = imp.storage().data_ptr().bytes()?;
        let start = usize::try_from(range.start).ok()?;
        let end = usize::try_from(range.end).ok()?;
        let found = scan_bytes(imp.dtype(), bytes.get(start..end)?);
        return Some(NonFinite {
            first: None,
            ..found
        });
    }
    scan_tensor(imp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor_impl::tests::{storage_of, view};
    use crate::{DType, Format, Tensor};
    use std::sync::Arc;

    fn float32s(n: usize, special: &[(usize, f32)]) -> Vec<u8> {
        let mut bytes = vec![0u8; n * 4];
        for &(i, v) in special {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        bytes
    }

    /// A checkpoint of these views, each named by its position.
    fn checkpoint(views: Vec<TensorImpl>) -> Checkpoint {
        let storages = views.iter().map(|v| Arc::clone(v.storage())).collect();
        let tensors = views
            .into_iter()
            .enumerate()
            .map(|(i, v)| Tensor::new(format!("t{i}"), Arc::new(v)))
            .collect();
        crate::testing::checkpoint("hand-made.pt", Format::PytorchZip, tensors, storages)
    }

    #[test]
    fn chunks_of_a_large_tensor_merge_to_the_whole_tensor_counts() {
        // 12 MB of float32 spans two 8 MiB chunks; NaN in the second, +Inf in the first.
        let n = 3_000_000;
        let bytes = float32s(
            n,
            &[
                (2_500_000, f32::NAN),
                (2_999_999, f32::NAN),
                (2_097_151, f32::INFINITY),
            ],
        );
        let s = storage_of(DType::Float32, bytes);
        let ckpt = checkpoint(vec![view(&s, &[n as u64], &[1], 0)]);
        let progress = AtomicU64::new(0);
        let found = scan_checkpoint(&ckpt, Some(&progress))[&0];
        assert_eq!(
            (found.nan, found.pos_inf, found.first),
            (2, 1, Some(2_097_151))
        );
        assert_eq!(progress.load(Ordering::Relaxed), n as u64 * 4);
    }

    #[test]
    fn a_view_reaching_its_elements_many_times_is_scanned_once_per_element() {
        // 101 000 float32, one NaN; a [100 000, 1 000] view with strides [1, 1] reaches
        // each element up to a thousand times: 10^8 logical elements.
        let s = storage_of(DType::Float32, float32s(101_000, &[(5, f32::NAN)]));
        let t = view(&s, &[100_000, 1_000], &[1, 1], 0);
        let found = scan_strided(&t).expect("scannable");
        assert_eq!((found.nan, found.first), (1, None));
        // The same with a broadcast dimension in front: still bounded by the distinct bytes.
        let t = view(&s, &[7, 100_000, 1_000], &[0, 1, 1], 0);
        let found = scan_strided(&t).expect("scannable");
        assert_eq!((found.nan, found.first), (1, None));
    }

    #[test]
    fn every_kind_of_tensor_is_keyed_by_its_index() {
        let s = storage_of(
            DType::Float32,
            float32s(6, &[(1, f32::NAN), (3, f32::NEG_INFINITY)]),
        );
        let ints = storage_of(DType::Int32, vec![0xff; 16]);
        let ckpt = checkpoint(vec![
            view(&ints, &[4], &[1], 0),       // not scannable: absent
            view(&s, &[3, 2], &[1, 3], 0),    // transpose: -Inf first, at logical 1
            view(&s, &[1000, 3], &[0, 1], 0), // broadcast: each NaN a thousand times
            view(&s, &[4], &[1], 3),          // past its storage: absent
            view(&s, &[0], &[1], 0),          // empty: clean
        ]);
        let found = scan_checkpoint(&ckpt, None);
        let mut keys: Vec<usize> = found.keys().copied().collect();
        keys.sort_unstable();
        assert_eq!(keys, vec![1, 2, 4]);
        assert_eq!(
            (found[&1].nan, found[&1].neg_inf, found[&1].first),
            (1, 1, Some(1))
        );
        assert_eq!((found[&2].nan, found[&2].first), (1000, Some(1)));
        assert!(found[&4].is_clean());
    }
}
