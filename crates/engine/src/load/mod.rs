//! Checkpoint readers, one file per format, chosen by content.

mod index;
mod json;
pub mod safetensors;
pub mod safetensors_index;
pub mod sniff;

pub use index::ShardIndex;
pub use sniff::{sniff, Sniffed};

use crate::error::{Error, Result};
use crate::Checkpoint;
use std::io::Read;
use std::path::Path;

/// Reads any supported checkpoint, picking the reader from the file's first bytes.
pub fn open(path: &Path) -> Result<Checkpoint> {
    match sniff_file(path)? {
        Sniffed::Safetensors => safetensors::load(path),
        Sniffed::JsonIndex => open_index(path),
        Sniffed::Zip => Err(Error::UnsupportedFormat {
            path: path.to_owned(),
            format: "PyTorch zip archive",
        }),
        Sniffed::LegacyPickle => Err(Error::UnsupportedFormat {
            path: path.to_owned(),
            format: "legacy PyTorch pickle",
        }),
        Sniffed::Unknown => Err(unknown(path)),
    }
}

/// Classifies a file by reading its first bytes.
pub fn sniff_file(path: &Path) -> Result<Sniffed> {
    let prefix = read_prefix(path)?;
    if prefix.is_empty() {
        return Err(Error::Empty {
            path: path.to_owned(),
        });
    }
    Ok(sniff(&prefix))
}

fn read_prefix(path: &Path) -> Result<Vec<u8>> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut prefix = Vec::with_capacity(sniff::SNIFF_LEN);
    file.take(sniff::SNIFF_LEN as u64)
        .read_to_end(&mut prefix)
        .map_err(io)?;
    Ok(prefix)
}

fn unknown(path: &Path) -> Error {
    let first_bytes = read_prefix(path)
        .map(|p| {
            p.iter()
                .take(16)
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    Error::UnknownFormat {
        path: path.to_owned(),
        first_bytes,
    }
}

/// An index's format follows from its shards' content; all shards must agree.
fn open_index(path: &Path) -> Result<Checkpoint> {
    let index = ShardIndex::read(path)?;
    let mut expected: Option<(Sniffed, &str)> = None;
    for shard in index.shards() {
        let shard_path = ShardIndex::shard_path(path, shard);
        let kind = sniff_file(&shard_path).map_err(|source| Error::Shard {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        if matches!(kind, Sniffed::Unknown | Sniffed::JsonIndex) {
            return Err(Error::Shard {
                path: path.to_owned(),
                source: Box::new(unknown(&shard_path)),
            });
        }
        match expected {
            None => expected = Some((kind, shard)),
            Some((first, _)) if first != kind => {
                return Err(Error::IndexMixedFormats {
                    path: path.to_owned(),
                    shard: shard.to_owned(),
                    found: shard_kind_name(kind),
                    expected: shard_kind_name(first),
                })
            }
            Some(_) => {}
        }
    }
    match expected.map(|(kind, _)| kind) {
        Some(Sniffed::Safetensors) => safetensors_index::load(path, &index),
        _ => Err(Error::UnsupportedFormat {
            path: path.to_owned(),
            format: "PyTorch sharded index",
        }),
    }
}

fn shard_kind_name(kind: Sniffed) -> &'static str {
    match kind {
        Sniffed::Safetensors => "safetensors",
        Sniffed::Zip => "a PyTorch zip archive",
        Sniffed::LegacyPickle => "a legacy PyTorch pickle",
        Sniffed::JsonIndex => "JSON",
        Sniffed::Unknown => "unrecognised",
    }
}
