//! Checkpoint readers, one module per format, grouped by family (`torch/`, `zip/`, `pt2/`,
//! `dcp/`, `numpy/`, `gguf/`, `joblib/`, `safetensors`), chosen by content, never by name.
//!
//! Every format is one row of the format table (`table::FORMATS`), declared next to its
//! reader: which real loader opens it and by which of that loader's rules (a file's whole
//! bytes, a zip archive's records, a directory's files). [`probe`] looks at a path once: the
//! first file row whose loader accepts the bytes says what it is ([`Sniffed`]), an index is
//! parsed there, a directory is matched against the directory rows. [`read`] turns that
//! [`Probe`] into a [`Checkpoint`]; [`open`] is the two in one, and [`from_buffer`] reads bytes
//! already in memory. Every reader writes through one `Sink`, and what CPython would run of
//! the same bytes as a pickle is judged beside it (`read_judged`).
//!
//! Adding a format is its reader module with its `ROW`, one line in `table::FORMATS`, and one
//! [`Format`] variant.

mod chat_template;
mod dcp;
mod flatten;
mod gguf;
mod hdf5;
mod in_order;
mod index;
mod joblib;
mod json;
mod keras;
mod limits;
pub mod live;
mod nested;
mod numpy;
mod pickle_file;
mod pickle_start;
mod polyglot;
mod probe;
mod pt2;
mod safetensors;
mod sb3;
mod sharded;
mod sink;
mod sniff;
mod table;
mod torch;
mod zip;

pub use flatten::ROOT_NAME;
pub(crate) use sink::{NewStorage, Scope, Sink};

#[cfg(test)]
pub(crate) use gguf::block_bytes as gguf_block_sizes;
pub use index::ShardIndex;
pub use limits::{ReadLimits, DEFAULT_MAX_MEMORY};
pub use probe::{probe, probe_directory, Probe};
pub use sniff::{sniff, Sniffed};
pub use table::{checkpoint_extensions, checkpoint_file_names, named_as_checkpoint};
pub(crate) use table::{reader, Reader};

use crate::error::{Error, Result};
use crate::{files, Checkpoint, Format, HostBuffer};
use probe::Found;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Reads any supported checkpoint, picking the reader from the file's content.
pub fn open(path: &Path) -> Result<Checkpoint> {
    read(probe(path)?)
}

/// Reads what [`probe`] found, within the default [`ReadLimits`].
pub fn read(probe: Probe) -> Result<Checkpoint> {
    read_with(probe, ReadLimits::default())
}

/// Reads what [`probe`] found: a single file with its reader, an index with its shards, a
/// directory with its row (one budget for the whole set).
pub fn read_with(probe: Probe, limits: ReadLimits) -> Result<Checkpoint> {
    match probe.found {
        // A remote object's bytes a reading could only find missing fail it here, whatever it
        // made of their absence.
        Found::File(reader) => {
            let read = files::open(&probe.path).and_then(|b| read_file_with(reader, &b, limits));
            files::checked(&probe.path, read)?
        }
        Found::Index(index) => files::checked(
            &index_root(&probe.path),
            sharded::read(&probe.path, &index, limits),
        )?,
        Found::Directory(_, row, _) => files::checked(
            &probe.path,
            sink::gather(&probe.path, limits, |sink| (row.read)(&probe.path, sink)),
        )?,
        Found::Refused(error) => Err(error),
    }
}

/// Where an index's shards lie: beside it.
fn index_root(index: &Path) -> PathBuf {
    index.parent().unwrap_or(index).to_owned()
}

/// Reads a single-file checkpoint already in memory (any format but an index), picking the
/// reader from its content; errors name `buffer.source()`.
pub fn from_buffer(buffer: Arc<HostBuffer>) -> Result<Checkpoint> {
    from_buffer_with(buffer, ReadLimits::default())
}

/// [`from_buffer`] within `limits`.
pub fn from_buffer_with(buffer: Arc<HostBuffer>, limits: ReadLimits) -> Result<Checkpoint> {
    let reader = single_file(&buffer)?;
    read_file_with(reader, &buffer, limits)
}

/// Runs the reader of `kind` over `buffer` whatever its content says, so a fuzzer can
/// drive one reader directly. Not a stable API: callers should let [`from_buffer`] choose.
#[doc(hidden)]
pub fn read_buffer_as(
    kind: Sniffed,
    buffer: &Arc<HostBuffer>,
    limits: ReadLimits,
) -> Result<Checkpoint> {
    let Some(reader) = reader(kind) else {
        return Err(probe::refusal(buffer.source(), kind, buffer.bytes()));
    };
    read_file_with(reader, buffer, limits)
}

/// Checks a torch.distributed.checkpoint `.metadata` alone (parsed, chunks tiled, items
/// located); returns how many items it locates. For a fuzzer: not a stable API.
#[doc(hidden)]
pub fn check_dcp_metadata(bytes: &[u8], limits: ReadLimits) -> Result<usize> {
    dcp::check_metadata(bytes, limits)
}

/// Reads a `.pt2` program's JSON as the `.pt2` reader does: the strings torch would evaluate,
/// as globals, and the signature's names, or why the JSON is refused. For a fuzzer: not a
/// stable API.
#[doc(hidden)]
pub fn check_pt2_program(
    text: &[u8],
) -> std::result::Result<(Vec<crate::unsafe_global::UnsafeGlobal>, Vec<String>), String> {
    pt2::check_program(text)
}

/// Runs one reader over one whole file within `limits`.
fn read_file_with(
    reader: Reader,
    buffer: &Arc<HostBuffer>,
    limits: ReadLimits,
) -> Result<Checkpoint> {
    sink::gather(buffer.source(), limits, |sink| {
        read_judged(reader, buffer, sink)
    })
}

/// Runs `reader` over `buffer` and names, beside what it reads, the globals of the pickle
/// CPython would run from the same bytes when its reader reads none: every loader that accepts
/// the bytes judges them.
fn read_judged(reader: Reader, buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let pickle =
        !reader.file.reads_pickle && sniff::decide(buffer, pickle_start::begins_pickle_in)?;
    let globals = match pickle {
        true => polyglot::pickle_globals(buffer, sink),
        false => Vec::new(),
    };
    match (reader.file.read)(buffer, sink) {
        Ok(format) => {
            sink.add_unsafe_globals(globals);
            Ok(format)
        }
        Err(e) => Err(e.with_unsafe_globals(globals)),
    }
}

/// The reader for a file that must be a single checkpoint (not an index), from its content.
fn single_file(buffer: &Arc<HostBuffer>) -> Result<Reader> {
    let path = buffer.source();
    let sniffed = sniff_nonempty(path, buffer)?;
    reader(sniffed).ok_or_else(|| probe::refusal(path, sniffed, buffer.bytes()))
}

/// What the whole file is. A safetensors header that is also a pickle is settled here, by its
/// name, so every caller (discovery, an index's shards) sees the format its reader reads: only
/// a polyglot no name settles stays one.
fn sniff_nonempty(path: &Path, buffer: &HostBuffer) -> Result<Sniffed> {
    if buffer.is_empty() {
        return Err(Error::Empty {
            path: path.to_owned(),
        });
    }
    match sniff::decide(buffer, sniff::sniff_prefix)? {
        Sniffed::Polyglot => Ok(polyglot::settle(path, buffer.bytes())),
        sniffed => Ok(sniffed),
    }
}

fn unknown(path: &Path, bytes: &[u8]) -> Error {
    let first_bytes: Vec<String> = bytes.iter().take(16).map(|b| format!("{b:02x}")).collect();
    Error::UnknownFormat {
        path: path.to_owned(),
        first_bytes: first_bytes.join(" "),
    }
}
