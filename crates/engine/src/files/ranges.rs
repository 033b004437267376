//! A set of byte ranges, kept sorted and merged.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-adjacent byte ranges: start → end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds `range`, merging it with the ranges it overlaps or touches.
    pub(crate) fn insert(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        let (mut start, mut end) = (range.start, range.end);
        if let Some((&s, &e)) = self.0.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let absorbed: Vec<u64> = self.0.range(start..=end).map(|(&s, _)| s).collect();
        for s in absorbed {
            if let Some(e) = self.0.remove(&s) {
                end = end.max(e);
            }
        }
        self.0.insert(start, end);
    }

    /// Whether every byte of `range` is in the set.
    pub(crate) fn contains(&self, range: Range<u64>) -> bool {
        self.0
            .range(..=range.start)
            .next_back()
            .is_some_and(|(_, &end)| end >= range.end)
    }

    /// How many bytes of a range end at or past `at` and begin before it: the run of them
    /// leading up to `at`.
    pub(crate) fn run_ending_at(&self, at: u64) -> u64 {
        match self.0.range(..at).next_back() {
            Some((&start, &end)) if end >= at => at - start,
            _ => 0,
        }
    }

    /// The bytes of `self` not in `other`.
    pub(crate) fn subtract(&self, other: &Ranges) -> Ranges {
        let mut out = Ranges::default();
        for range in self.iter() {
            let mut at = range.start;
            for (&s, &e) in other.0.range(..range.end) {
                if e <= at {
                    continue;
                }
                if s > at {
                    out.insert(at..s.min(range.end));
                }
                at = at.max(e);
                if at >= range.end {
                    break;
                }
            }
            if at < range.end {
                out.insert(at..range.end);
            }
        }
        out
    }

    /// The ranges, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.0.iter().map(|(&s, &e)| s..e)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Ranges;
    use proptest::prelude::*;

    fn set(ranges: &[(u64, u64)]) -> Ranges {
        let mut set = Ranges::default();
        for &(s, e) in ranges {
            set.insert(s..e);
        }
        set
    }

    #[test]
    fn inserting_merges_overlapping_and_touching_ranges() {
        let merged: Vec<_> = set(&[(10, 20), (30, 40), (20, 25), (5, 12), (39, 50)])
            .iter()
            .collect();
        assert_eq!(merged, vec![5..25, 30..50]);
        let ranges = set(&[(5, 25), (30, 50)]);
        let runs: Vec<u64> = [5, 6, 25, 26, 30, 50, 51]
            .map(|at| ranges.run_ending_at(at))
            .into();
        assert_eq!(runs, [0, 1, 20, 0, 0, 20, 0]);
        assert!(ranges.contains(5..25) && ranges.contains(30..31) && ranges.contains(40..40));
        assert!(!ranges.contains(4..6) && !ranges.contains(20..31) && !ranges.contains(0..1));
    }

    proptest! {
        #[test]
        fn membership_is_that_of_the_bytes(
            a in prop::collection::vec((0u64..200, 0u64..40), 0..8),
            b in prop::collection::vec((0u64..200, 0u64..40), 0..8),
        ) {
            let a: Vec<(u64, u64)> = a.into_iter().map(|(s, l)| (s, s + l)).collect();
            let b: Vec<(u64, u64)> = b.into_iter().map(|(s, l)| (s, s + l)).collect();
            let inside = |r: &[(u64, u64)], x: u64| r.iter().any(|&(s, e)| s <= x && x < e);
            let diff = set(&a).subtract(&set(&b));
            for x in 0..260 {
                let in_diff = diff.iter().any(|r| r.contains(&x));
                prop_assert_eq!(in_diff, inside(&a, x) && !inside(&b, x));
            }
            let ends: Vec<_> = diff.iter().collect();
            prop_assert!(ends.windows(2).all(|w| w[0].end < w[1].start));
        }
    }
}
