//! Pickle safety.

mod torchscript_code;
mod unsafe_global;

pub use torchscript_code::TorchscriptCode;
pub use unsafe_global::UnsafeGlobalRule;
