//! One pool's cached blocks (`small_blocks` / `large_blocks` in CCA.cpp): ordered by size,
//! then address, so that the best fit is the first at least as large as a request.
//!
//! The block cached last is held beside the ordered set rather than in it. Loading a
//! checkpoint splits the block it allocated from and caches the rest, which the next
//! allocation takes again: held apart, that block goes in and out of the pool without a
//! tree search (a million-tensor load made three per allocation). The set and the held
//! block together are the pool; every query answers over both.

use std::collections::BTreeSet;

/// Cached blocks as (size, address) keys.
#[derive(Debug, Default)]
pub(super) struct FreeBlocks {
    ordered: BTreeSet<(u64, u64)>,
    /// The block cached last, never also in `ordered`.
    newest: Option<(u64, u64)>,
}

impl FreeBlocks {
    /// Caches a block.
    pub(super) fn insert(&mut self, key: (u64, u64)) {
        if let Some(older) = self.newest.replace(key) {
            self.ordered.insert(older);
        }
    }

    /// Takes a block out of the cache; false when it was not cached.
    pub(super) fn remove(&mut self, key: &(u64, u64)) -> bool {
        if self.newest.as_ref() == Some(key) {
            self.newest = None;
            true
        } else {
            self.ordered.remove(key)
        }
    }

    /// The smallest cached block of at least `size` bytes, lowest address first.
    pub(super) fn best_fit(&self, size: u64) -> Option<(u64, u64)> {
        let ordered = self.ordered.range((size, 0)..).next().copied();
        let newest = self.newest.filter(|&(block, _)| block >= size);
        match (ordered, newest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The largest cached block.
    pub(super) fn largest(&self) -> Option<(u64, u64)> {
        self.ordered.last().copied().max(self.newest)
    }

    /// Every cached block in order, for the release paths' walks.
    pub(super) fn ordered(&mut self) -> &BTreeSet<(u64, u64)> {
        if let Some(newest) = self.newest.take() {
            self.ordered.insert(newest);
        }
        &self.ordered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Remove(u64, u64),
        BestFit(u64),
        Largest,
        Ordered,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few sizes and addresses, so that keys repeat and best fits tie on size.
        let key = (0u64..8, 0u64..8);
        prop_oneof![
            key.clone().prop_map(|(s, a)| Op::Insert(s, a)),
            key.prop_map(|(s, a)| Op::Remove(s, a)),
            (0u64..9).prop_map(Op::BestFit),
            Just(Op::Largest),
            Just(Op::Ordered),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Every answer is the plain ordered set's, whatever the held block is.
        #[test]
        fn answers_as_one_ordered_set(ops in proptest::collection::vec(op(), 0..64)) {
            let mut pool = FreeBlocks::default();
            let mut plain = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Insert(size, address) => {
                        // The allocator never caches a block twice.
                        if plain.insert((size, address)) {
                            pool.insert((size, address));
                        }
                    }
                    Op::Remove(size, address) => {
                        prop_assert_eq!(
                            pool.remove(&(size, address)),
                            plain.remove(&(size, address))
                        );
                    }
                    Op::BestFit(size) => {
                        prop_assert_eq!(
                            pool.best_fit(size),
                            plain.range((size, 0)..).next().copied()
                        );
                    }
                    Op::Largest => prop_assert_eq!(pool.largest(), plain.last().copied()),
                    Op::Ordered => prop_assert_eq!(pool.ordered(), &plain),
                }
            }
            prop_assert_eq!(pool.ordered(), &plain);
        }
    }
}
