//! Pickle safety.

mod torchscript_code;
mod unsafe_global;
mod weights_only_load;

pub use torchscript_code::TorchscriptCode;
pub use unsafe_global::UnsafeGlobalRule;
pub(crate) use unsafe_global::{allowed_seen, runs_code};
pub use weights_only_load::WeightsOnlyLoad;
