//! File integrity. These rules report what the readers refuse: the runner turns a failed
//! read into their findings (see `crate::audit::read_failure`).

mod corrupt_file;
mod index_mismatch;

pub use corrupt_file::CorruptFile;
pub use index_mismatch::IndexMismatch;
