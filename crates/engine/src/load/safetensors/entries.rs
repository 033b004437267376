//! A header's validated entries, held in chunks: the layers are built a chunk at a time and
//! each chunk is freed once its layers are made, so a million entries (80 MB) and the layers
//! they become (over 300 MB) are never held whole together.

use super::Entry;
use rayon::prelude::*;

/// Entries per chunk: 640 KB of them. The last chunks are still held when the layers are
/// whole, the peak of the read: chunks of 5 MB added 10 MB to it.
pub(super) const CHUNK: usize = 1 << 13;

/// The entries in the order they were read, then sorted by offset.
#[derive(Debug, Default)]
pub(super) struct Entries {
    chunks: Vec<Vec<Entry>>,
    len: usize,
    // Room the reader expects in all, so a small header takes no chunk-sized list.
    room: usize,
}

impl Entries {
    /// Room for `room` entries, taken a chunk at a time as they come.
    pub(super) fn with_room(room: usize) -> Self {
        Entries {
            room,
            ..Entries::default()
        }
    }

    pub(super) fn push(&mut self, entry: Entry) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(entry),
            _ => {
                let room = self.room.saturating_sub(self.len).clamp(1, CHUNK);
                let mut chunk = Vec::with_capacity(room);
                chunk.push(entry);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.chunks.iter().flatten()
    }

    /// The entry at `index`, in the order read (or sorted). Every chunk but the last is as
    /// long as the first (filled to `CHUNK`, or the one sorted list), so no walk.
    pub(super) fn get(&self, index: usize) -> Option<&Entry> {
        let per = self.chunks.first()?.len().max(1);
        self.chunks.get(index / per)?.get(index % per)
    }

    pub(super) fn last(&self) -> Option<&Entry> {
        self.chunks.last().and_then(|chunk| chunk.last())
    }

    /// By data offset; ties, which only zero-size tensors can make, by name. Writers list a
    /// header's entries in offset order, which is kept as it is; any other order is sorted in
    /// one list.
    pub(super) fn sort_by_offset(&mut self) {
        if self.iter().is_sorted_by_key(offset_key) {
            return;
        }
        // One list of exactly their number, each chunk freed as it is moved: never twice the
        // entries the meter was charged for.
        let mut all = Vec::with_capacity(self.len);
        for chunk in std::mem::take(&mut self.chunks) {
            all.extend(chunk);
        }
        all.par_sort_unstable_by(|a, b| offset_key(a).cmp(&offset_key(b)));
        self.chunks = vec![all];
    }

    /// The chunks, in order, to be consumed one by one.
    pub(super) fn into_chunks(self) -> impl Iterator<Item = Vec<Entry>> {
        self.chunks.into_iter()
    }
}

/// What entries are ordered by: data offsets, then the name.
fn offset_key(entry: &Entry) -> (u64, u64, &str) {
    (entry.start, entry.end, &entry.name)
}

impl From<Vec<Entry>> for Entries {
    fn from(list: Vec<Entry>) -> Self {
        let len = list.len();
        Entries {
            chunks: vec![list],
            len,
            room: len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Dims;
    use crate::DType;
    use std::sync::Arc;

    fn entry(name: &str, start: u64, end: u64) -> Entry {
        Entry {
            name: Arc::from(name),
            dtype: DType::UInt8,
            shape: Dims::from_slice(&[end - start]),
            start,
            end,
        }
    }

    fn names(entries: &Entries) -> Vec<String> {
        entries.iter().map(|e| e.name.to_string()).collect()
    }

    #[test]
    fn entries_past_a_chunk_keep_their_order_and_sort_across_chunks() {
        let n = CHUNK + 3;
        let mut entries = Entries::with_room(n);
        for i in 0..n as u64 {
            entries.push(entry(&format!("t{i}"), i, i + 1));
        }
        assert_eq!((entries.len(), entries.chunks.len()), (n, 2));
        assert_eq!(entries.last().map(|e| e.end), Some(n as u64));
        let at = |entries: &Entries| -> Vec<Option<u64>> {
            (0..=n).map(|i| entries.get(i).map(|e| e.start)).collect()
        };
        let every: Vec<_> = (0..n as u64).map(Some).chain([None]).collect();
        assert_eq!(at(&entries), every);
        // In offset order already: kept in its chunks.
        entries.sort_by_offset();
        assert_eq!(entries.chunks.len(), 2);

        // Reversed, with a tie of two empty tensors at one offset (ordered by name).
        let mut entries = Entries::with_room(3);
        for e in [entry("c", 1, 2), entry("b", 0, 0), entry("a", 0, 0)] {
            entries.push(e);
        }
        entries.sort_by_offset();
        assert_eq!(names(&entries), ["a", "b", "c"]);
        let mut entries = Entries::with_room(n);
        for i in (0..n as u64).rev() {
            entries.push(entry(&format!("t{i}"), i, i + 1));
        }
        entries.sort_by_offset();
        let starts: Vec<u64> = entries.iter().map(|e| e.start).collect();
        assert!(starts.windows(2).all(|w| w[0] < w[1]) && starts.len() == n);
        assert_eq!(at(&entries), every);
    }

    #[test]
    fn a_small_header_takes_a_small_list() {
        let mut entries = Entries::with_room(2);
        entries.push(entry("a", 0, 1));
        assert_eq!(entries.chunks.first().map(Vec::capacity), Some(2));
    }
}
