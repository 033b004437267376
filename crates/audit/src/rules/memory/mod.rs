//! Memory shape of a checkpoint.

mod allocator_overhead;
mod fragmentation;
mod memory_budget;

pub use allocator_overhead::AllocatorOverhead;
pub(crate) use fragmentation::score as fragmentation_score;
pub use fragmentation::FragmentationScore;
pub use memory_budget::MemoryBudget;
