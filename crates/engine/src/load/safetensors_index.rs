//! A sharded safetensors set read through its `model.safetensors.index.json`.

use super::index::ShardIndex;
use crate::error::Result;
use crate::{Checkpoint, Format};
use std::path::Path;

/// Reads every shard the index names into one checkpoint and checks that the index and
/// the shards agree. The shards' own `__metadata__` is not merged.
pub fn load(path: &Path, index: &ShardIndex) -> Result<Checkpoint> {
    index.load_shards(path, Format::SafetensorsIndex, |buffer, parts| {
        super::safetensors::read_into(buffer, parts).map(drop)
    })
}
