//! The unpickler's memo. Picklers number memo entries 0, 1, 2… in order, so keys index a
//! vector; scattered keys, which only a hand-made stream uses, go to a map.

use super::budget::{doubled, grown_by, slice_bytes, table_bytes, Growth};
use super::heap::Id;
use std::collections::HashMap;
use std::mem::size_of;
use std::num::NonZeroU32;

/// How far past the dense part a key may land and still extend it.
const MAX_GAP: u64 = 1024;

#[derive(Debug, Default)]
pub(super) struct Memo {
    /// `id + 1` by key, so that an empty slot takes no more than a full one: four bytes.
    dense: Vec<Option<NonZeroU32>>,
    sparse: HashMap<u64, Id>,
    len: usize,
}

impl Memo {
    /// A memo with room for `capacity` dense keys before it regrows.
    pub fn with_capacity(capacity: usize) -> Self {
        Memo {
            dense: Vec::with_capacity(capacity),
            ..Memo::default()
        }
    }

    /// Number of distinct keys stored (Python's `len(memo)`).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, key: u64) -> Option<Id> {
        match usize::try_from(key).ok().and_then(|k| self.dense.get(k)) {
            Some(slot) => slot.map(|stored| stored.get() - 1),
            None => self.sparse.get(&key).copied(),
        }
    }

    /// The bytes it holds: every dense slot written, the gaps between keys included (a stream
    /// can leave a thousand empty slots a key), and the scattered keys' table.
    pub fn bytes(&self) -> u64 {
        slice_bytes::<Option<NonZeroU32>>(self.dense.len())
            .saturating_add(table_bytes(self.sparse.capacity(), SPARSE_ENTRY))
    }

    /// How inserting `key` grows it: a dense list or a table grown, or nothing where it has
    /// room.
    pub fn growth(&self, key: u64) -> Growth {
        if !self.is_dense(key) {
            if self.sparse.len() < self.sparse.capacity() || self.sparse.contains_key(&key) {
                return Growth::default();
            }
            let capacity = self.sparse.capacity();
            return Growth {
                new: table_bytes(doubled(capacity), SPARSE_ENTRY),
                old: table_bytes(capacity, SPARSE_ENTRY),
            };
        }
        // Dense keys are below the list's length plus the gap: they fit a `usize`. The list
        // grows to hold the key, whatever lies between.
        let slots = (key as usize).saturating_add(1);
        grown_by::<Option<NonZeroU32>>(0, self.dense.capacity(), slots)
    }

    /// Whether `key` goes in the dense list: the next key in order, or one within the gap past
    /// it that no scattered key already holds.
    fn is_dense(&self, key: u64) -> bool {
        key < (self.dense.len() as u64).saturating_add(MAX_GAP)
            && (self.sparse.is_empty() || !self.sparse.contains_key(&key))
    }

    /// Stores `id` under `key`, replacing what was there. Ids are below [`Id::MAX`]: the heap
    /// makes no other (one that were not would read as never stored, a refusal).
    pub fn insert(&mut self, key: u64, id: Id) {
        let Some(stored) = NonZeroU32::new(id.wrapping_add(1)) else {
            return;
        };
        // The next key in order, as picklers write them: no gap to fill, and no key can be
        // sparse (a sparse key lies at or past the gap beyond the dense part).
        if key == self.dense.len() as u64 && self.sparse.is_empty() {
            self.dense.push(Some(stored));
            self.len += 1;
            return;
        }
        if self.is_dense(key) {
            // Bounded by the gap: at most MAX_GAP slots beyond the current length.
            let index = key as usize;
            if index >= self.dense.len() {
                self.dense.resize(index + 1, None);
            }
            if let Some(slot) = self.dense.get_mut(index) {
                if slot.replace(stored).is_none() {
                    self.len += 1;
                }
            }
        } else if self.sparse.insert(key, id).is_none() {
            self.len += 1;
        }
    }
}

/// A scattered key's entry in its table.
const SPARSE_ENTRY: usize = size_of::<(u64, Id)>();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_scattered_keys() {
        let mut m = Memo::default();
        m.insert(0, 10);
        m.insert(1, 11);
        m.insert(1, 12);
        m.insert(5, 15);
        m.insert(u64::from(u32::MAX), 99);
        assert_eq!(m.len(), 4);
        assert_eq!(
            (m.get(0), m.get(1), m.get(2), m.get(5)),
            (Some(10), Some(12), None, Some(15))
        );
        assert_eq!(m.get(u64::from(u32::MAX)), Some(99));
        assert_eq!(m.get(3), None);
    }
}
