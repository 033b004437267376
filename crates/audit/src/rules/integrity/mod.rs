//! File integrity. These rules report what the readers refuse: each claims the read
//! failures of its kind (`read_failure`), and configuration cannot turn them off.

mod corrupt_file;
mod index_mismatch;
mod over_budget;

pub use corrupt_file::CorruptFile;
pub use index_mismatch::IndexMismatch;
pub use over_budget::OverBudget;
