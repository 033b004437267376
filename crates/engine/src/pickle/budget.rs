//! Limits that keep a hostile pickle's cost bounded, and what the lists and tables a reading
//! keeps take of the memory one.

/// How much work and memory one pickle stream may take.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Opcodes executed: a bound on time, as the memory budget bounds what they build.
    pub max_ops: u64,
    /// Container nesting followed when walking the result.
    pub max_depth: usize,
    /// Values visited when walking the result (shared sub-objects count each time they are
    /// reached), or twice the stream's values where that is more.
    pub max_visits: usize,
    /// Bytes the whole read may hold (`--max-memory`); the stream's values (strings, bytes,
    /// containers) and its memo, stack and marks (as allocated) are counted against it.
    pub max_memory: u64,
    /// Bytes the read already holds before this stream.
    pub memory_held: u64,
}

impl Budget {
    /// The same budget, with `bytes` more already held.
    pub fn holding(&self, bytes: u64) -> Budget {
        Budget {
            memory_held: self.memory_held.saturating_add(bytes),
            ..*self
        }
    }
}

impl Default for Budget {
    fn default() -> Self {
        // Far above any real checkpoint (a million-tensor `torch.save` runs 30 M opcodes),
        // far below what would keep a CI runner busy for long.
        Budget {
            max_ops: 200_000_000,
            max_depth: 256,
            max_visits: 20_000_000,
            max_memory: crate::memory::DEFAULT_MAX_MEMORY,
            memory_held: 0,
        }
    }
}

/// A list grown: the bytes of the new one, and of the old one it frees (which the allocator
/// may keep a while). Both zero where the list had room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Growth {
    pub new: u64,
    pub old: u64,
}

/// How a full list of `len` items of `T` (of room for `capacity`) grows by one.
pub(super) fn grown_list<T>(len: usize, capacity: usize) -> Growth {
    grown_by::<T>(len, capacity, 1)
}

/// How a list of `len` items of `T` (of room for `capacity`) grows to take `more`: as Rust's
/// vectors and `ThinVec` grow, to twice its room (four at least) or what it needs if more.
pub(super) fn grown_by<T>(len: usize, capacity: usize, more: usize) -> Growth {
    let needed = len.saturating_add(more);
    if needed <= capacity {
        return Growth::default();
    }
    Growth {
        new: slice_bytes::<T>(needed.max(capacity.saturating_mul(2)).max(4)),
        old: slice_bytes::<T>(capacity),
    }
}

/// `n` values of `T`, in bytes.
pub(super) fn slice_bytes<T>(n: usize) -> u64 {
    (n as u64).saturating_mul(std::mem::size_of::<T>() as u64)
}

/// The bytes of a hash table with room for `capacity` entries of `entry` bytes: its slots a
/// power of two with an eighth spare, a byte of control each.
pub(super) fn table_bytes(capacity: usize, entry: usize) -> u64 {
    let slots = capacity.saturating_mul(8) / 7;
    (slots.next_power_of_two() as u64).saturating_mul(entry as u64 + 1)
}

/// A full table's capacity once it grows: it doubles.
pub(super) fn doubled(capacity: usize) -> usize {
    (capacity.max(3) + 1).saturating_mul(2)
}
