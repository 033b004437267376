//! Checkpoint readers, one file per format, chosen by content.

mod flatten;
mod index;
mod json;
mod parts;
pub mod safetensors;
pub mod safetensors_index;
pub mod sniff;
mod torch;
pub mod torch_index;
pub mod torch_legacy;
pub mod torch_zip;

pub use flatten::ROOT_NAME;
pub(crate) use parts::Parts;

pub use index::ShardIndex;
pub use sniff::{sniff, Sniffed};

use crate::error::{Error, Result};
use crate::{Checkpoint, Format, HostBuffer};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// Reads any supported checkpoint, picking the reader from the file's first bytes.
pub fn open(path: &Path) -> Result<Checkpoint> {
    let prefix = read_prefix(path)?;
    match sniff_prefix(path, &prefix)? {
        Sniffed::Safetensors => safetensors::load(path),
        Sniffed::JsonIndex => open_index(path),
        Sniffed::Zip => torch_zip::load(path),
        Sniffed::LegacyPickle => torch_legacy::load(path),
        Sniffed::Unknown => Err(unknown(path, &prefix)),
    }
}

/// Reads a single-file checkpoint already in memory (any format but an index), picking the
/// reader from its first bytes; errors name `buffer.source()`.
pub fn from_buffer(buffer: Arc<HostBuffer>) -> Result<Checkpoint> {
    let path = buffer.source().to_owned();
    let mut parts = Parts::default();
    let format = match sniff(
        buffer
            .bytes()
            .get(..sniff::SNIFF_LEN)
            .unwrap_or(buffer.bytes()),
    ) {
        Sniffed::Safetensors => {
            parts.metadata = safetensors::read_into(&buffer, &mut parts)?;
            Format::Safetensors
        }
        Sniffed::Zip => torch_zip::read_into(&buffer, &mut parts)?,
        Sniffed::LegacyPickle => {
            torch_legacy::read_into(&buffer, &mut parts)?;
            Format::PytorchLegacy
        }
        Sniffed::JsonIndex | Sniffed::Unknown if buffer.is_empty() => {
            return Err(Error::Empty { path })
        }
        Sniffed::JsonIndex | Sniffed::Unknown => return Err(unknown(&path, buffer.bytes())),
    };
    Ok(parts.finish(&path, format))
}

/// Classifies a file by reading its first bytes.
pub fn sniff_file(path: &Path) -> Result<Sniffed> {
    sniff_prefix(path, &read_prefix(path)?)
}

fn sniff_prefix(path: &Path, prefix: &[u8]) -> Result<Sniffed> {
    if prefix.is_empty() {
        return Err(Error::Empty {
            path: path.to_owned(),
        });
    }
    Ok(sniff(prefix))
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

fn unknown(path: &Path, prefix: &[u8]) -> Error {
    let first_bytes: Vec<String> = prefix.iter().take(16).map(|b| format!("{b:02x}")).collect();
    Error::UnknownFormat {
        path: path.to_owned(),
        first_bytes: first_bytes.join(" "),
    }
}

/// An index's format follows from its shards' content; all shards must agree.
fn open_index(path: &Path) -> Result<Checkpoint> {
    let index = ShardIndex::read(path)?;
    let mut expected: Option<(Sniffed, &str)> = None;
    for shard in index.shards() {
        let shard_path = ShardIndex::shard_path(path, shard);
        let shard_err = |source| Error::Shard {
            path: path.to_owned(),
            source: Box::new(source),
        };
        let prefix = read_prefix(&shard_path).map_err(shard_err)?;
        let kind = sniff_prefix(&shard_path, &prefix).map_err(shard_err)?;
        if matches!(kind, Sniffed::Unknown | Sniffed::JsonIndex) {
            return Err(shard_err(unknown(&shard_path, &prefix)));
        }
        let family = |k: Sniffed| {
            if k == Sniffed::Safetensors {
                k
            } else {
                Sniffed::Zip
            }
        };
        match expected {
            None => expected = Some((kind, shard)),
            // Zip and legacy shards are both torch.save output and may mix.
            Some((first, _)) if family(first) != family(kind) => {
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
        _ => torch_index::load(path, &index),
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
