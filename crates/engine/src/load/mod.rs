//! Checkpoint readers, one file per format, grouped by family (`torch/`, `zip/`, `pt2/`,
//! `dcp/`, `numpy/`, `gguf/`, `safetensors`), chosen by content, never by name.
//!
//! [`probe`] looks at a path once: its first bytes say what it is ([`Sniffed`]), an index is
//! parsed there, a directory is matched against the directory table. [`read`] turns that
//! [`Probe`] into a [`Checkpoint`]; [`open`] is the two in one, and [`from_buffer`] reads bytes
//! already in memory. A single file, bytes in memory and each shard of an index all get their
//! reader from the file table below, `reader`; every reader writes through one `Sink`.
//! NumPy's `.npy` and `.npz` (`numpy/`) are read here too: an `.npz` is a row of the zip table.
//! A joblib file is a pickle (the plain pickle row reads its arrays, `joblib/`) or, compressed,
//! a row of its own.
//!
//! Adding a format is one reader file (a `ReadFn`), one row in `reader` (or in
//! `directory_readers`, or in the zip table `zip::kind::ZIP_KINDS`), and one [`Format`]
//! variant — plus, when its first bytes look like nothing yet known, one [`Sniffed`] variant.

mod dcp;
mod flatten;
mod gguf;
mod index;
mod joblib;
mod json;
mod limits;
pub mod live;
mod numpy;
mod pickle_file;
mod pickle_start;
mod polyglot;
mod probe;
mod pt2;
mod safetensors;
mod sharded;
mod sink;
mod sniff;
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

use crate::error::{Error, Result};
use crate::{files, Checkpoint, Format, HostBuffer};
use probe::Found;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A reader: writes one file's tensors and storages (and its metadata) through `sink` and
/// says which format the file is.
pub(crate) type ReadFn = fn(&Arc<HostBuffer>, &mut Sink<'_>) -> Result<Format>;

/// One row of the reader table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader {
    pub read: ReadFn,
    /// The format a sharded set of such files forms; an index's shards may mix only within one.
    pub index: Format,
    /// What such a file is, in messages.
    pub what: &'static str,
}

/// The reader table: the one place where content meets the code that reads it. An index is
/// read through its shards' rows; unknown content has none.
#[rustfmt::skip]
pub(crate) fn reader(kind: Sniffed) -> Option<Reader> {
    let row = |read: ReadFn, index, what| Some(Reader { read, index, what });
    match kind {
        //                           reader                   sharded as                what, in messages
        Sniffed::Safetensors  => row(safetensors::read_into,  Format::SafetensorsIndex, "safetensors"),
        Sniffed::Numpy        => row(numpy::read_into,        Format::Numpy,            "a NumPy .npy array"),
        Sniffed::Gguf         => row(gguf::read_into,         Format::Gguf,             "a GGUF file"),
        Sniffed::Zip          => row(zip::kind::read_into,     Format::PytorchIndex,     "a PyTorch zip archive"),
        Sniffed::LegacyPickle => row(torch::legacy::read_into, Format::PytorchIndex,     "a legacy PyTorch pickle"),
        Sniffed::Pickle       => row(pickle_file::read_into,  Format::PytorchIndex,     "a plain pickle"),
        Sniffed::Joblib       => row(joblib::read_into,       Format::Joblib,           "a compressed joblib file"),
        Sniffed::Tar          => row(torch::tar::read_into,    Format::PytorchIndex,     "an old PyTorch tar archive"),
        Sniffed::Polyglot     => row(polyglot::read_into,     Format::PytorchIndex,     "both safetensors and a pickle"),
        Sniffed::JsonIndex | Sniffed::LfsPointer | Sniffed::Unknown => None,
    }
}

/// One row of the directory table: a checkpoint made of a directory of files.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirReader {
    /// The files that make `dir` one, in reading order; `None` when it is not one.
    pub files: fn(&Path) -> Option<Vec<PathBuf>>,
    /// Whether a file is one part of such a directory, never a checkpoint alone.
    pub is_part: fn(&Path) -> bool,
    pub read: fn(&Path, &mut Sink<'_>) -> Result<Format>,
    /// What such a directory is, in messages.
    pub what: &'static str,
    /// What one of its files is, in messages.
    pub part: &'static str,
}

/// The directory table: checkpoints that are directories, probed by their files.
#[rustfmt::skip]
pub(crate) fn directory_readers() -> [DirReader; 1] {
    [
        DirReader { files: dcp::parts, is_part: dcp::is_part, read: dcp::read_into,
                    what: "torch.distributed.checkpoint directory", part: "a .distcp file of a torch.distributed.checkpoint" },
    ]
}

/// Reads any supported checkpoint, picking the reader from the file's first bytes.
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
        Found::File(reader) => files::settle(&probe.path, || {
            read_file_with(reader.read, &files::open(&probe.path)?, limits)
        })?,
        Found::Index(index) => files::settle(&index_root(&probe.path), || {
            sharded::read(&probe.path, &index, limits)
        })?,
        Found::Directory(row, _) => files::settle(&probe.path, || {
            sink::gather(&probe.path, limits, |sink| (row.read)(&probe.path, sink))
        })?,
        Found::Refused(error) => Err(error),
    }
}

/// Where an index's shards lie: beside it.
fn index_root(index: &Path) -> PathBuf {
    index.parent().unwrap_or(index).to_owned()
}

/// Reads a single-file checkpoint already in memory (any format but an index), picking the
/// reader from its first bytes; errors name `buffer.source()`.
pub fn from_buffer(buffer: Arc<HostBuffer>) -> Result<Checkpoint> {
    from_buffer_with(buffer, ReadLimits::default())
}

/// [`from_buffer`] within `limits`.
pub fn from_buffer_with(buffer: Arc<HostBuffer>, limits: ReadLimits) -> Result<Checkpoint> {
    let bytes = buffer.bytes();
    let prefix = bytes.get(..sniff::SNIFF_LEN).unwrap_or(bytes);
    let reader = single_file(buffer.source(), prefix, || Ok(buffer.clone()))?;
    read_file_with(reader.read, &buffer, limits)
}

/// Runs the reader of `kind` over `buffer` whatever its first bytes say, so a fuzzer can
/// drive one reader directly. Not a stable API: callers should let [`from_buffer`] choose.
#[doc(hidden)]
pub fn read_buffer_as(
    kind: Sniffed,
    buffer: &Arc<HostBuffer>,
    limits: ReadLimits,
) -> Result<Checkpoint> {
    let Some(reader) = reader(kind) else {
        let bytes = buffer.bytes();
        let prefix = bytes.get(..sniff::SNIFF_LEN).unwrap_or(bytes);
        return Err(probe::refusal(buffer.source(), kind, prefix));
    };
    read_file_with(reader.read, buffer, limits)
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
    read: ReadFn,
    buffer: &Arc<HostBuffer>,
    limits: ReadLimits,
) -> Result<Checkpoint> {
    sink::gather(buffer.source(), limits, |sink| read(buffer, sink))
}

/// The reader for a file that must be a single checkpoint (not an index), from its first bytes
/// (and, for a [`Sniffed::Polyglot`], the whole file `whole` gives).
fn single_file(
    path: &Path,
    prefix: &[u8],
    whole: impl FnOnce() -> Result<Arc<HostBuffer>>,
) -> Result<Reader> {
    let sniffed = sniff_nonempty(path, prefix, whole)?;
    reader(sniffed).ok_or_else(|| probe::refusal(path, sniffed, prefix))
}

/// What the first bytes say the file is. A safetensors header that may begin a pickle is
/// settled here, from the whole file and its name, so every caller (discovery, an index's
/// shards) sees the format its reader reads: only a polyglot no name settles stays one.
fn sniff_nonempty(
    path: &Path,
    prefix: &[u8],
    whole: impl FnOnce() -> Result<Arc<HostBuffer>>,
) -> Result<Sniffed> {
    if prefix.is_empty() {
        return Err(Error::Empty {
            path: path.to_owned(),
        });
    }
    match sniff(prefix) {
        Sniffed::Polyglot => Ok(polyglot::settle(path, whole()?.bytes())),
        sniffed => Ok(sniffed),
    }
}

fn unknown(path: &Path, prefix: &[u8]) -> Error {
    if let Some(name) = joblib::refused_compressor(prefix) {
        return Error::Joblib {
            path: path.to_owned(),
            part: "compression".into(),
            detail: format!(
                "begins with {name}'s magic, as joblib.dump(..., compress='{name}') writes: \
                 tensorplay inflates zlib and gzip only, so what it holds is not read"
            ),
        };
    }
    let first_bytes: Vec<String> = prefix.iter().take(16).map(|b| format!("{b:02x}")).collect();
    Error::UnknownFormat {
        path: path.to_owned(),
        first_bytes: first_bytes.join(" "),
    }
}
