//! Limits that keep a hostile pickle's cost bounded.

/// How much work and memory one pickle stream may take.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Opcodes executed.
    pub max_ops: u64,
    /// Values created.
    pub max_nodes: usize,
    /// Stack entries at once.
    pub max_stack: usize,
    /// Memo entries.
    pub max_memo: usize,
    /// Container nesting followed when walking the result.
    pub max_depth: usize,
    /// Values visited when walking the result (shared sub-objects count each time they are reached).
    pub max_visits: usize,
    /// Bytes the whole read may hold (`--max-memory`); the stream's values (strings, bytes,
    /// containers, memo, stack) are counted in bytes against it.
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
        // Far above any real checkpoint (a 100 000-tensor state dict needs ~2M values),
        // far below what would exhaust a CI runner.
        Budget {
            max_ops: 200_000_000,
            max_nodes: 20_000_000,
            max_stack: 4_000_000,
            max_memo: 8_000_000,
            max_depth: 256,
            max_visits: 20_000_000,
            max_memory: crate::memory::DEFAULT_MAX_MEMORY,
            memory_held: 0,
        }
    }
}
