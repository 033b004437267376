//! What readers accumulate: a checkpoint under construction, shared by the readers of sharded sets.

use super::limits::Meter;
use super::torchscript::TorchScriptCode;
use crate::pickle::weights_only::set_storage;
use crate::pickle::{UnsafeGlobal, WeightsOnly};
use crate::{Checkpoint, ChunkedTensor, CompositeTensor, Format, LeftOut, Storage, Tensor};
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
    /// What `torch.load` would do with the files read so far.
    pub weights_only: Option<WeightsOnly>,
    /// Values holding no tensor, by name.
    pub left_out: LeftOut,
    /// The read's memory account.
    pub meter: Meter,
}

/// What torch says rebuilding the tensors: the first that does not fit its storage.
fn rebuilt(tensors: &[Tensor]) -> WeightsOnly {
    tensors
        .iter()
        .find_map(|t| {
            set_storage(t)
                .err()
                .map(|reason| WeightsOnly::refuses(t.name(), reason))
        })
        .unwrap_or(WeightsOnly::Loads)
}

impl Parts {
    /// Notes what `torch.load` would do with one more file or pickle: the first refusal stays.
    pub fn weights_only(&mut self, next: WeightsOnly) {
        self.weights_only = Some(match self.weights_only.take() {
            Some(so_far) => so_far.and(next),
            None => next,
        });
    }

    pub fn finish(self, path: &Path, format: Format) -> Checkpoint {
        let weights_only = self
            .weights_only
            .filter(|_| format.torch_load())
            .map(|w| w.and(rebuilt(&self.tensors)));
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
            // Only where torch.load is the file's loader.
            weights_only,
            left_out: self.left_out,
            held_bytes: self.meter.held(),
        }
    }
}
