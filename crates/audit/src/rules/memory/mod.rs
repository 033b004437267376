//! Memory shape of a checkpoint.

mod fragmentation;

pub use fragmentation::FragmentationScore;
