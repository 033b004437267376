//! A sharded safetensors set read through its `model.safetensors.index.json`.

use super::index::ShardIndex;
use crate::error::{Error, Result};
use crate::{Checkpoint, Format, HostBuffer};
use std::collections::BTreeMap;
use std::path::Path;

/// Reads every shard the index names (in sorted shard order) into one checkpoint and checks
/// that the index and the shards agree.
pub fn load(path: &Path, index: &ShardIndex) -> Result<Checkpoint> {
    let mut ckpt = Checkpoint {
        path: path.to_owned(),
        format: Format::SafetensorsIndex,
        tensors: Vec::new(),
        storages: Vec::new(),
        metadata: BTreeMap::new(),
    };
    let shards = index.shards();
    let mut first_tensor_of_shard = Vec::with_capacity(shards.len());
    for shard in &shards {
        first_tensor_of_shard.push(ckpt.tensors.len());
        let shard_path = ShardIndex::shard_path(path, shard);
        HostBuffer::map_file(&shard_path)
            .and_then(|buffer| {
                super::safetensors::read_into(&buffer, &mut ckpt.tensors, &mut ckpt.storages)
            })
            .map_err(|source| Error::Shard {
                path: path.to_owned(),
                source: Box::new(source),
            })?;
    }
    first_tensor_of_shard.push(ckpt.tensors.len());
    let held: Vec<(&str, Vec<&str>)> = shards
        .iter()
        .zip(first_tensor_of_shard.windows(2))
        .map(|(shard, w)| {
            let names = ckpt.tensors.get(w[0]..w[1]).unwrap_or_default();
            (*shard, names.iter().map(|t| t.name()).collect())
        })
        .collect();
    index.check_against(path, &held)?;
    Ok(ckpt)
}
