//! Numeric health of tensor values.

mod non_finite;

pub use non_finite::NonFiniteValues;
