//! A zip reader that resolves entries exactly as PyTorch's `PyTorchStreamReader`
//! (`caffe2/serialize/inline_container.cc`, on miniz 3.0.2) does, and refuses every archive
//! another reader could resolve differently.
//!
//! miniz takes the last end-record signature in the file, reads the central directory at the
//! offset the (zip64) end record gives, finds names by a case-insensitive binary search, and
//! takes sizes from the central directory and the data's start from the local header's name
//! and extra lengths, never reading the local name. Python's `zipfile` and the `zip` crate
//! differ on each point. So an archive is read only when nothing is left to choose: one end
//! record, the central directory right before it, every name unique ignoring ASCII case, every
//! local header agreeing with its central entry, and entries, central directory and end
//! records tiling the file from byte 0 to the last with nothing in between.

mod central;
mod end;
mod every_pickle;
mod fields;
pub(super) mod kind;
mod local;
mod names;
#[cfg(test)]
mod tests;

use super::limits::Meter;
use crate::error::{Error, Result};
use crate::{inflate, HostBackend, HostBuffer};
use std::borrow::Cow;
use std::path::Path;

pub(crate) use central::Entry;
pub(crate) use every_pickle::globals_of_every_pickle;

/// A validated archive over the file's bytes.
pub(crate) struct Zip<'a> {
    file: File<'a>,
    entries: Vec<Entry>,
    /// The entries by name ignoring ASCII case, as miniz's sorted directory finds them.
    names: names::Names,
}

impl<'a> Zip<'a> {
    /// Reads and checks the end records, the central directory and every local header; what
    /// the directory will take in memory is held against `meter` before it is read. Only the
    /// parts read are asked of `buffer` (of a remote object, fetched).
    pub fn open(buffer: &'a HostBuffer, meter: &Meter) -> Result<Self> {
        let file = File::new(buffer);
        let end = end::locate(&file)?;
        meter.hold(file.path, directory_cost(&end), || {
            format!("the central directory's {} entries", end.count)
        })?;
        let mut entries = central::read(&file, &end)?;
        let names = names::unique_names(&file, &entries)?;
        local::prefetch(&file, &entries);
        local::check(&file, &mut entries, end.cd_offset)?;
        Ok(Zip {
            file,
            entries,
            names,
        })
    }

    /// Entries in central-directory order (the order miniz numbers them).
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entry PyTorch's reader finds for a whole `name` (readers use [`Self::position`]).
    #[cfg(test)]
    pub fn find(&self, name: &str) -> Option<&Entry> {
        self.position(&[], name).and_then(|i| self.entries.get(i))
    }

    /// The central-directory index of the entry PyTorch's reader finds for the name `folders`
    /// and `name` make joined by '/': the one whose name equals it ignoring ASCII case (names
    /// are unique that way, so miniz's binary search has one answer). Empty folders are left
    /// out and the name is kept even when empty, as `format!("{folder}/{name}")` would.
    pub fn position(&self, folders: &[&str], name: &str) -> Option<usize> {
        names::search(&self.names, &self.entries, folders, name)
    }

    /// [`Self::position`], trying the entry at `guess` first: `torch.save` writes records in
    /// the order its pickle names them, so the entry after the last one found is nearly
    /// always the next one asked for. Names are unique ignoring case, so a match is the
    /// answer the search would give.
    pub fn position_from(&self, guess: usize, folders: &[&str], name: &str) -> Option<usize> {
        let hit = self
            .entries
            .get(guess)
            .is_some_and(|entry| names::is_joined(entry.name.as_bytes(), folders, name));
        if hit {
            return Some(guess);
        }
        self.position(folders, name)
    }

    /// An entry's bytes: borrowed when stored, inflated (exactly its declared size) otherwise.
    pub fn read(&self, entry: &Entry) -> Result<Cow<'a, [u8]>> {
        let compressed = self.compressed(entry)?;
        match entry.method {
            central::STORED => Ok(Cow::Borrowed(compressed)),
            central::DEFLATED => inflate::all(compressed, entry.size)
                .map(Cow::Owned)
                .map_err(|detail| self.file.damaged(&entry.name, detail)),
            other => Err(self.file.damaged(
                &entry.name,
                format!("compression method {other} is not supported"),
            )),
        }
    }

    /// Inflates a deflated entry in pieces of `chunk` bytes (see [`inflate::chunks`]), checking
    /// that it gives exactly its declared size; the error names the entry. `each` also gets
    /// the file offset up to which the compressed bytes have been consumed.
    pub fn inflate_each(
        &self,
        entry: &Entry,
        chunk: usize,
        mut each: impl FnMut(u64, &[u8], u64),
    ) -> Result<()> {
        let compressed = self.compressed(entry)?;
        let start = entry.data_start;
        inflate::chunks(compressed, entry.size, chunk, |at, piece, consumed| {
            each(at, piece, start.saturating_add(consumed))
        })
        .map_err(|detail| self.file.damaged(&entry.name, detail))
    }

    /// Where a deflated entry's compressed bytes lie in the file, once it is known to be
    /// readable, without inflating them; `None` when the entry is not deflated.
    pub fn deflated_range(&self, entry: &Entry) -> Result<Option<std::ops::Range<u64>>> {
        self.compressed(entry)?;
        if entry.method != central::DEFLATED {
            return Ok(None);
        }
        // `compressed` found these bytes inside the file, so the end cannot overflow.
        let end = entry
            .data_start
            .checked_add(entry.compressed)
            .ok_or(Error::Overflow {
                what: "zip entry end",
            })?;
        Ok(Some(entry.data_start..end))
    }

    /// Up to `n` leading bytes of an entry, inflating no more than that.
    pub fn peek(&self, entry: &Entry, n: usize) -> Result<Cow<'a, [u8]>> {
        let compressed = self.compressed(entry)?;
        match entry.method {
            central::STORED => Ok(Cow::Borrowed(compressed.get(..n).unwrap_or(compressed))),
            _ => Ok(Cow::Owned(inflate::prefix(compressed, n))),
        }
    }

    /// The bytes as stored in the file, once the entry is known to be readable.
    fn compressed(&self, entry: &Entry) -> Result<&'a [u8]> {
        let file = self.file;
        if entry.flags & central::UNREADABLE_FLAGS != 0 {
            return Err(file.damaged(&entry.name, "encrypted entries are not supported"));
        }
        file.slice(entry.data_start, entry.compressed)
            .ok_or_else(|| file.damaged(&entry.name, "data runs past the end of the file"))
    }
}

/// An upper bound on the memory the directory takes once read: per entry its [`Entry`], a
/// lookup slot and a place in the local-order check; its names, bounded by the directory's
/// size. The slot and a second copy of the names are still counted as when the lookup was a
/// hash map of lowercased names, now an overestimate, so that a file fits the same budget as
/// before.
fn directory_cost(end: &end::End) -> u64 {
    const SLOT: u64 = (std::mem::size_of::<(String, usize)>() as u64 + 1) * 2;
    const PER_ENTRY: u64 =
        std::mem::size_of::<Entry>() as u64 + SLOT + std::mem::size_of::<&Entry>() as u64;
    end.count
        .saturating_mul(PER_ENTRY)
        .saturating_add(end.cd_size.saturating_mul(2))
}

/// The file being read, and the two ways it can be refused.
#[derive(Clone, Copy)]
struct File<'a> {
    path: &'a Path,
    buffer: &'a HostBuffer,
    /// A local file's bytes, sliced directly (a directory of many entries asks for many).
    local: Option<&'a [u8]>,
}

impl<'a> File<'a> {
    fn new(buffer: &'a HostBuffer) -> Self {
        let local = (buffer.backend() != HostBackend::Remote).then(|| buffer.bytes());
        File {
            path: buffer.source(),
            buffer,
            local,
        }
    }

    fn len(&self) -> u64 {
        self.buffer.len()
    }

    /// `len` bytes at `at`, or `None` when they run past the end or (of a remote object)
    /// cannot be fetched, which `files::checked` then reports.
    fn slice(&self, at: u64, len: u64) -> Option<&'a [u8]> {
        let end = at.checked_add(len)?;
        if let Some(bytes) = self.local {
            return bytes.get(usize::try_from(at).ok()?..usize::try_from(end).ok()?);
        }
        if end > self.len() {
            return None;
        }
        let bytes = self.buffer.range(at..end).ok()?;
        (bytes.len() as u64 == len).then_some(bytes)
    }

    /// Malformed: no reader would make sense of it.
    fn damaged(&self, part: &str, detail: impl Into<String>) -> Error {
        Error::Malformed {
            path: self.path.to_owned(),
            part: part.to_owned(),
            detail: detail.into(),
        }
    }

    /// Well-formed enough that readers disagree on what it holds.
    fn ambiguous(&self, reason: impl Into<String>) -> Error {
        Error::AmbiguousArchive {
            path: self.path.to_owned(),
            reason: reason.into(),
        }
    }
}
