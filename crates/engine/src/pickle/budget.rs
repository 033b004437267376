//! Limits that keep a hostile pickle's cost bounded.

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
