//! What a scan finds: counts of NaN and ±Inf and where the first one is.

use super::Class;

/// Counts of non-finite values in a floating tensor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NonFinite {
    /// Elements that are NaN (for complex: either part NaN).
    pub nan: u64,
    /// Elements that are +Inf (for complex: no NaN part, first infinite part positive).
    pub pos_inf: u64,
    /// Elements that are −Inf (for complex: no NaN part, first infinite part negative).
    pub neg_inf: u64,
    /// Logical (row-major) index of the first non-finite element.
    pub first: Option<u64>,
}

impl NonFinite {
    /// All non-finite elements: NaN, +Inf and −Inf together (saturating).
    pub fn total(&self) -> u64 {
        self.nan
            .saturating_add(self.pos_inf)
            .saturating_add(self.neg_inf)
    }

    /// Whether no element is non-finite.
    pub fn is_clean(&self) -> bool {
        self.total() == 0
    }

    /// Combines the counts of two consecutive chunks: `self` covers the elements before
    /// `later`, which starts at logical index `later_offset`. The first index of `self` wins;
    /// otherwise `later`'s, offset by `later_offset`. Counts saturate rather than wrap.
    pub fn merge(self, later: NonFinite, later_offset: u64) -> NonFinite {
        NonFinite {
            nan: self.nan.saturating_add(later.nan),
            pos_inf: self.pos_inf.saturating_add(later.pos_inf),
            neg_inf: self.neg_inf.saturating_add(later.neg_inf),
            first: self
                .first
                .or_else(|| later.first.map(|i| i.saturating_add(later_offset))),
        }
    }

    /// The same elements counted `times` times (a view that reaches each of them through
    /// `times` broadcast positions); the first index stays, as the first repeat comes first.
    pub(super) fn repeated(self, times: u64) -> NonFinite {
        NonFinite {
            nan: self.nan.saturating_mul(times),
            pos_inf: self.pos_inf.saturating_mul(times),
            neg_inf: self.neg_inf.saturating_mul(times),
            first: self.first,
        }
    }

    /// Counts `class` as one more element at logical index `index`.
    pub(super) fn add(&mut self, class: Class, index: u64) {
        match class {
            Class::Finite => return,
            Class::Nan => self.nan = self.nan.saturating_add(1),
            Class::PosInf => self.pos_inf = self.pos_inf.saturating_add(1),
            Class::NegInf => self.neg_inf = self.neg_inf.saturating_add(1),
        }
        self.first.get_or_insert(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_the_first_first() {
        let a = NonFinite {
            nan: 1,
            pos_inf: 0,
            neg_inf: 2,
            first: Some(5),
        };
        let b = NonFinite {
            nan: 3,
            pos_inf: 1,
            neg_inf: 0,
            first: Some(2),
        };
        let clean = NonFinite::default();
        assert_eq!(
            a.merge(b, 100),
            NonFinite {
                nan: 4,
                pos_inf: 1,
                neg_inf: 2,
                first: Some(5)
            }
        );
        assert_eq!(clean.merge(b, 100).first, Some(102));
        assert_eq!(clean.merge(clean, 7), clean);
        assert!(clean.is_clean());
        assert_eq!(a.total(), 3);
        let huge = NonFinite { nan: u64::MAX, ..a };
        assert_eq!(huge.merge(huge, u64::MAX).nan, u64::MAX);
        assert_eq!(huge.total(), u64::MAX);
    }

    #[test]
    fn repeats_multiply_counts_and_keep_the_first() {
        let a = NonFinite {
            nan: 2,
            pos_inf: 1,
            neg_inf: 0,
            first: Some(3),
        };
        assert_eq!(
            a.repeated(5),
            NonFinite {
                nan: 10,
                pos_inf: 5,
                neg_inf: 0,
                first: Some(3)
            }
        );
        assert_eq!(a.repeated(u64::MAX).nan, u64::MAX);
        assert_eq!(a.repeated(1), a);
    }
}
