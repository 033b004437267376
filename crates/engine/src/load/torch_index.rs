//! A sharded PyTorch set read through its `pytorch_model.bin.index.json`.

use super::index::ShardIndex;
use super::sniff::{sniff, Sniffed};
use crate::error::{Error, Result};
use crate::{Checkpoint, Format};
use std::path::Path;

/// Reads every shard (zip or legacy, by content) into one checkpoint and checks that the
/// index and the shards agree.
pub fn load(path: &Path, index: &ShardIndex) -> Result<Checkpoint> {
    index.load_shards(path, Format::PytorchIndex, |buffer, parts| {
        match sniff(
            buffer
                .bytes()
                .get(..super::sniff::SNIFF_LEN)
                .unwrap_or(buffer.bytes()),
        ) {
            Sniffed::LegacyPickle => super::torch_legacy::read_into(buffer, parts),
            Sniffed::Zip => match super::torch_zip::read_into(buffer, parts)? {
                Format::PytorchZip => Ok(()),
                _ => Err(Error::UnsupportedFormat {
                    path: buffer.source().to_owned(),
                    format: "TorchScript archive as a shard",
                }),
            },
            _ => Err(Error::UnsupportedFormat {
                path: buffer.source().to_owned(),
                format: "non-PyTorch shard",
            }),
        }
    })
}
