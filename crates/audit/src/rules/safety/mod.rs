//! Pickle safety.

mod unsafe_global;

pub use unsafe_global::UnsafeGlobalRule;
