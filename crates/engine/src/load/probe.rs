//! Looking at a path once: what its content says it is and, for an index, the index itself,
//! so that whoever decides what to read (discovery, `open`) and the reading share one look.

use super::table::{directory_readers, named_reader, DirReader};
use super::{reader, sniff_nonempty, unknown, Reader, ShardIndex, Sniffed};
use crate::error::{Error, Result};
use crate::files;
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
    /// A checkpoint directory: what it is, its reader and the files it is made of.
    Directory(&'static str, DirReader, Vec<PathBuf>),
    /// Content nothing reads, or JSON that is no valid index: reading it reports this.
    Refused(Error),
}

/// Looks at the whole of `path` as the loaders would and, when it is JSON, parses it as an
/// index.
/// Fails only when the file cannot be read or is empty; content no reader takes is reported
/// by [`read`](super::read), and so is a file that is only part of a checkpoint directory
/// (a `.distcp` file alone). A checkpoint directory is read as a whole (its `sniffed` is
/// `Unknown`: it has no first bytes).
pub fn probe(path: &Path) -> Result<Probe> {
    let whole = |found| {
        Ok(Probe {
            path: path.to_owned(),
            sniffed: Sniffed::Unknown,
            found,
        })
    };
    for (_, row) in directory_readers() {
        if (row.is_part)(path) {
            return whole(Found::Refused(Error::DirectoryPart {
                path: path.to_owned(),
                part: row.part,
            }));
        }
    }
    if let Some(probe) = probe_directory(path) {
        return Ok(probe);
    }
    let probed = (|| {
        let buffer = files::open(path)?;
        let sniffed = sniff_nonempty(path, &buffer)?;
        if let Some((reader, format)) = named_reader(path, sniffed) {
            return Ok(Probe {
                path: path.to_owned(),
                sniffed: Sniffed::Format(format),
                found: Found::File(reader),
            });
        }
        let found = match (reader(sniffed), sniffed) {
            (Some(reader), _) => Found::File(reader),
            (None, Sniffed::JsonIndex) => {
                ShardIndex::read(path).map_or_else(Found::Refused, Found::Index)
            }
            (None, _) => Found::Refused(refusal(path, sniffed, buffer.bytes())),
        };
        Ok(Probe {
            path: path.to_owned(),
            sniffed,
            found,
        })
    })();
    files::checked(path, probed)?
}

/// The directory-table row that reads `dir` as one checkpoint, probed; `None` when no row
/// takes it (a plain folder, a file).
pub fn probe_directory(dir: &Path) -> Option<Probe> {
    if !files::is_dir(dir) {
        return None;
    }
    directory_readers().find_map(|(what, row)| {
        let files = (row.files)(dir)?;
        Some(Probe {
            path: dir.to_owned(),
            sniffed: Sniffed::Unknown,
            found: Found::Directory(what, row, files),
        })
    })
}

impl Probe {
    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file is, by the first loader that accepts it.
    pub fn sniffed(&self) -> Sniffed {
        self.sniffed
    }

    /// The index, when the file is JSON that parses as one.
    pub fn index(&self) -> Option<&ShardIndex> {
        match &self.found {
            Found::Index(index) => Some(index),
            Found::File(_) | Found::Refused(_) | Found::Directory(..) => None,
        }
    }

    /// What kind of checkpoint directory it is, when it is one.
    pub fn directory(&self) -> Option<&'static str> {
        match &self.found {
            Found::Directory(what, ..) => Some(what),
            _ => None,
        }
    }

    /// The files the input is made of, in reading order: the file itself; an index and its
    /// shards; a directory's files. What discovery passes over as parts and `--partition`
    /// weighs.
    pub fn files(&self) -> Vec<PathBuf> {
        match &self.found {
            Found::Index(index) => std::iter::once(self.path.clone())
                .chain(
                    index
                        .shards()
                        .into_iter()
                        .map(|shard| ShardIndex::shard_path(&self.path, shard)),
                )
                .collect(),
            Found::Directory(_, _, files) => files.clone(),
            Found::File(_) | Found::Refused(_) => vec![self.path.clone()],
        }
    }
}

/// Why a file no loader accepts is not read: a Git LFS pointer says what to do, anything else
/// shows its first bytes.
pub(super) fn refusal(path: &Path, sniffed: Sniffed, bytes: &[u8]) -> Error {
    match sniffed {
        Sniffed::LfsPointer => Error::LfsPointer {
            path: path.to_owned(),
        },
        _ => unknown(path, bytes),
    }
}
