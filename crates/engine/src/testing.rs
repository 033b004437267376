//! Storages and checkpoints built by hand, for tests of what no reader writes (a view past
//! its storage, a meta tensor beside a CPU one). Not a stable API: readers build both
//! through their sink.

use crate::{Checkpoint, DType, DataPtr, Format, Storage, StorageId, Tensor};
use std::path::PathBuf;
use std::sync::Arc;

/// A storage numbered `id`, with its key and location as a file would record them.
pub fn storage(
    id: usize,
    key: impl Into<Arc<str>>,
    dtype: DType,
    nbytes: u64,
    location: impl AsRef<str>,
    data_ptr: DataPtr,
) -> Storage {
    Storage::new(StorageId::new(id), key, dtype, nbytes, location, data_ptr)
}

/// A checkpoint of `path` holding these tensors and storages, and nothing else.
pub fn checkpoint(
    path: impl Into<PathBuf>,
    format: Format,
    tensors: Vec<Tensor>,
    storages: Vec<Arc<Storage>>,
) -> Checkpoint {
    Checkpoint {
        path: path.into(),
        format,
        tensors,
        storages,
        metadata: Default::default(),
        chat_templates: Vec::new(),
        keras: None,
        unsafe_globals: Vec::new(),
        torchscript: None,
        chunked: Vec::new(),
        weights_only: None,
        composites: Vec::new(),
        left_out: Default::default(),
        held_bytes: 0,
    }
}
