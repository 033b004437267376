//! What readers accumulate: a checkpoint under construction, shared by the readers of sharded sets.

use super::limits::Meter;
use super::torchscript::TorchScriptCode;
use crate::pickle::UnsafeGlobal;
use crate::{Checkpoint, ChunkedTensor, CompositeTensor, Format, Storage, Tensor};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Tensors, storages and findings gathered so far; storage ids are positions in `storages`.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    pub tensors: Vec<Tensor>,
    pub composites: Vec<CompositeTensor>,
    pub storages: Vec<Arc<Storage>>,
    pub unsafe_globals: Vec<UnsafeGlobal>,
    pub metadata: BTreeMap<String, String>,
    pub torchscript: Option<TorchScriptCode>,
    pub chunked: Vec<ChunkedTensor>,
    /// The read's memory account.
    pub meter: Meter,
}

impl Parts {
    pub fn finish(self, path: &Path, format: Format) -> Checkpoint {
        Checkpoint {
            path: path.to_owned(),
            format,
            tensors: self.tensors,
            storages: self.storages,
            metadata: self.metadata,
            unsafe_globals: self.unsafe_globals,
            torchscript: self.torchscript,
            chunked: self.chunked,
            composites: self.composites,
        }
    }
}
