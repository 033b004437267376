//! A pickle machine that executes nothing.
//!
//! It runs every opcode of protocols 0–5 with Python's stack, MARK and memo semantics, but a
//! global is only ever a name: [`allowlist`] decides which names (PyTorch's `weights_only`
//! set, plus TorchScript's own in a TorchScript archive: [`Loader`]) are interpreted — tensor
//! rebuilds, `OrderedDict`, dtypes, storage classes — and every other one is recorded as an
//! [`UnsafeGlobal`] and kept as an opaque object so reading goes on.
//! [`Budget`] bounds the time and memory a hostile stream can cost.

pub mod allowlist;
mod budget;
mod calls;
mod dict_keys;
mod heap;
mod inline;
mod literals;
mod machine;
mod memo;
pub(crate) mod opcodes;
mod storage_bytes;
pub mod weights_only;

pub use crate::unsafe_global::UnsafeGlobal;
pub use crate::weights_only::WeightsOnly;
pub use allowlist::Loader;
pub use budget::Budget;
pub use heap::{CompositeSpec, Global, Heap, Id, Node, Object, TensorSpec};
pub use inline::{Inline, InlineArray, Inlined};
pub use machine::{unpickle, unpickle_inline, Unpickled};
pub use storage_bytes::BytesStorage;

#[cfg(test)]
mod tests;
