//! A sharded set read through its index: each shard by its own row of the reader table, then
//! the index checked against what the shards hold.

use super::limits::ReadLimits;
use super::{read_judged, single_file, sink, Reader, ShardIndex, Sink};
use crate::error::{Error, Result};
use crate::{files, Checkpoint, Format};
use rayon::prelude::*;
use std::path::Path;

/// Reads every shard the index names (in sorted name order) into one checkpoint, whose format
/// follows from the shards' content.
pub(super) fn read(path: &Path, index: &ShardIndex, limits: ReadLimits) -> Result<Checkpoint> {
    let shards = shard_readers(path, index)?;
    let format = shards
        .first()
        .map(|(_, reader)| reader.file.index)
        .ok_or_else(|| Error::IndexEmpty {
            path: path.to_owned(),
        })?;
    sink::gather(path, limits, |sink| {
        let mut held_by = Vec::with_capacity(shards.len());
        for (shard, reader) in &shards {
            let first = sink.tensor_mark();
            read_shard(path, shard, reader, sink).map_err(in_shard(path))?;
            held_by.push((*shard, first..sink.tensor_mark()));
        }
        let all = sink.tensors_since(0);
        let held: Vec<(&str, Vec<&str>)> = held_by
            .into_iter()
            .map(|(shard, range)| {
                let names = all.get(range).unwrap_or_default();
                (shard, names.iter().map(|t| t.name()).collect())
            })
            .collect();
        index.check_against(path, &held)?;
        // A shard's `__metadata__` describes that file, not the set; it is not merged.
        sink.clear_metadata();
        Ok(format)
    })
}

/// Every shard's reader, from its content, before any shard is read. All must form one
/// index format: zip and legacy shards are both `torch.save` output and may mix. The shards
/// are opened side by side (as many at once as the run has threads, `--jobs`): a remote
/// shard's first bytes are a request each, and a set of a hundred shards waits for one round
/// trip per thread instead of one per shard. The first error in shard order is the one told.
fn shard_readers<'a>(path: &Path, index: &'a ShardIndex) -> Result<Vec<(&'a str, Reader)>> {
    let shards = index.shards();
    let opened: Vec<Result<Reader>> = shards
        .par_iter()
        .map(|shard| {
            files::open(&ShardIndex::shard_path(path, shard))
                .and_then(|buffer| single_file(&buffer))
        })
        .collect();
    let mut readers: Vec<(&str, Reader)> = Vec::with_capacity(shards.len());
    for (&shard, reader) in shards.iter().zip(opened) {
        let reader = reader.map_err(in_shard(path))?;
        if let Some((_, first)) = readers.first() {
            if first.file.index != reader.file.index {
                return Err(Error::IndexMixedFormats {
                    path: path.to_owned(),
                    shard: shard.to_owned(),
                    found: reader.what,
                    expected: first.what,
                });
            }
        }
        readers.push((shard, reader));
    }
    Ok(readers)
}

fn read_shard(path: &Path, shard: &str, reader: &Reader, sink: &mut Sink<'_>) -> Result<()> {
    let buffer = files::open(&ShardIndex::shard_path(path, shard))?;
    // The first bytes say zip; only the archive itself says TorchScript, which is never a shard.
    if read_judged(*reader, &buffer, sink)? == Format::Torchscript {
        return Err(Error::UnsupportedFormat {
            path: buffer.source().to_owned(),
            format: "TorchScript archive as a shard",
        });
    }
    Ok(())
}

/// Wraps a shard's own error, which names the shard, in one naming the index.
fn in_shard(path: &Path) -> impl Fn(Error) -> Error + '_ {
    move |source| Error::Shard {
        path: path.to_owned(),
        source: Box::new(source),
    }
}
