//! tensorplay's model of a checkpoint, read without executing anything in it.
//!
//! PyTorch keeps every tensor in four layers, and so does this crate, one type per file:
//! [`Tensor`] (the named handle) → [`TensorImpl`] (layout, dtype, device, autograd flags) →
//! [`Storage`] (one shared byte buffer on one device) → [`DataPtr`] (where the bytes really
//! are). Readers in [`load`] rebuild those layers from a file's bytes; [`load::open`] picks the
//! reader from the file's content, never from its name.
#![deny(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod alloc;
pub mod chat_template;
pub mod checkpoint;
pub mod composite;
pub mod data_ptr;
pub mod device;
pub mod dtype;
pub mod elements;
pub mod error;
pub mod files;
mod inflate;
pub mod keras;
pub mod layout;
pub mod load;
pub mod memory;
pub mod numeric;
pub mod pickle;
pub mod storage;
pub mod tensor;
pub mod tensor_impl;
#[doc(hidden)]
pub mod testing;
pub mod torchscript_code;
pub mod units;
pub mod unsafe_global;
pub mod views;
pub mod weights_only;

pub use chat_template::ChatTemplate;
pub use checkpoint::{Checkpoint, ChunkedTensor, Format, LeftOut, TensorChunk};
pub use composite::{Component, CompositeTensor};
pub use data_ptr::{DataPtr, Deferred, Owner};
pub use device::Device;
pub use dtype::{DType, DTypeKind};
pub use error::{Error, ErrorKind, RemoteBound, Result};
pub use keras::{KerasMember, KerasModel};
pub use layout::Layout;
pub use memory::{set_hand_back, HostBackend, HostBuffer};
pub use storage::{Storage, StorageId};
pub use tensor::{HeldAs, Tensor};
pub use tensor_impl::TensorImpl;
pub use weights_only::WeightsOnly;
