//! Looking at a path once: what its first bytes say it is and, for an index, the index itself,
//! so that whoever decides what to read (discovery, `open`) and the reading share one look.

use super::{reader, sniff_nonempty, unknown, Reader, ShardIndex, Sniffed};
use crate::error::{Error, Result};
use std::io::Read;
use std::path::{Path, PathBuf};

/// What one look at a path found; [`read`](super::read) reads it.
#[derive(Debug)]
pub struct Probe {
    pub(super) path: PathBuf,
    sniffed: Sniffed,
    pub(super) found: Found,
}

#[derive(Debug)]
pub(super) enum Found {
    /// A single checkpoint file and its row of the reader table.
    File(Reader),
    /// A sharded index, parsed.
    Index(ShardIndex),
    /// Content nothing reads, or JSON that is no valid index: reading it reports this.
    Refused(Error),
}

/// Reads the first bytes of `path` and, when they are JSON, parses the file as an index.
/// Fails only when the file cannot be read or is empty; content no reader takes is reported
/// by [`read`](super::read).
pub fn probe(path: &Path) -> Result<Probe> {
    let prefix = read_prefix(path)?;
    let sniffed = sniff_nonempty(path, &prefix)?;
    let found = match (reader(sniffed), sniffed) {
        (Some(reader), _) => Found::File(reader),
        (None, Sniffed::JsonIndex) => {
            ShardIndex::read(path).map_or_else(Found::Refused, Found::Index)
        }
        (None, _) => Found::Refused(unknown(path, &prefix)),
    };
    Ok(Probe {
        path: path.to_owned(),
        sniffed,
        found,
    })
}

impl Probe {
    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the first bytes say the file is.
    pub fn sniffed(&self) -> Sniffed {
        self.sniffed
    }

    /// The index, when the file is JSON that parses as one.
    pub fn index(&self) -> Option<&ShardIndex> {
        match &self.found {
            Found::Index(index) => Some(index),
            Found::File(_) | Found::Refused(_) => None,
        }
    }
}

/// Up to [`SNIFF_LEN`](super::sniff::SNIFF_LEN) leading bytes, without mapping the file.
pub(super) fn read_prefix(path: &Path) -> Result<Vec<u8>> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut prefix = Vec::with_capacity(super::sniff::SNIFF_LEN);
    file.take(super::sniff::SNIFF_LEN as u64)
        .read_to_end(&mut prefix)
        .map_err(io)?;
    Ok(prefix)
}
