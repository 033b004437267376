//! The read layer below every reader: a path is a local file (mapped) or a mounted remote
//! object (fetched by byte ranges as readers ask for them), and readers cannot tell which.
//!
//! Readers and probes open, list and measure paths only through this module, so a remote
//! checkpoint is read by the same code, to the same result, as a local one.

mod object;
mod ranges;
mod remote;
mod run;

pub use object::{ListedObject, RemoteError, RemoteLimits, RemoteObject, RemoteStats};
pub(crate) use remote::{RemoteBytes, HEAD};
pub use run::{
    begin_run, bytes_left, charge, checked, is_remote, listed_under, mount, read_whole, stats,
    stats_under, RunGuard,
};

use crate::error::{Error, Result};
use crate::HostBuffer;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The bytes of the file at `path`; through a broken symlink, an error naming its target.
pub(crate) fn open(path: &Path) -> Result<Arc<HostBuffer>> {
    if let Some(mounted) = run::mounted(path) {
        return mounted.open();
    }
    HostBuffer::map_file(path).map_err(|e| match e {
        Error::Io { source, .. } => open_error(path, source),
        e => e,
    })
}

/// Up to `max` leading bytes of the file at `path`, without mapping a local file.
pub(crate) fn read_prefix(path: &Path, max: u64) -> Result<Vec<u8>> {
    if let Some(mounted) = run::mounted(path) {
        return Ok(mounted.range(0..max)?.to_vec());
    }
    let file = std::fs::File::open(path).map_err(|e| open_error(path, e))?;
    let mut prefix = Vec::with_capacity(usize::try_from(max.min(1 << 20)).unwrap_or(0));
    file.take(max)
        .read_to_end(&mut prefix)
        .map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
    Ok(prefix)
}

/// Whether `path` is a file (a local regular file, or a mounted object).
pub fn is_file(path: &Path) -> bool {
    if run::mounted(path).is_some() {
        return true;
    }
    path.is_file()
}

/// Whether `path` is a directory (local, or above mounted objects).
pub fn is_dir(path: &Path) -> bool {
    if run::is_dir(path) {
        return true;
    }
    path.is_dir()
}

/// The entries of the directory `dir`, unsorted; `None` when it cannot be listed.
pub fn list_dir(dir: &Path) -> Option<Vec<PathBuf>> {
    if let Some(children) = run::children(dir) {
        return Some(children);
    }
    let entries = std::fs::read_dir(dir).ok()?;
    Some(entries.filter_map(|e| e.ok().map(|e| e.path())).collect())
}

/// The length of the file at `path`, when it can be measured.
pub(crate) fn len(path: &Path) -> Option<u64> {
    if let Some(stats) = run::stats(path) {
        return Some(stats.len);
    }
    std::fs::metadata(path).ok().map(|m| m.len())
}

/// An error opening `path`; through a symlink whose target is missing or which loops, that
/// link, with what it points to.
pub(crate) fn open_error(path: &Path, source: std::io::Error) -> Error {
    match std::fs::read_link(path) {
        Ok(target) if source.kind() != std::io::ErrorKind::PermissionDenied => {
            let detail = match source.kind() {
                std::io::ErrorKind::NotFound => "its target does not exist".to_owned(),
                _ => source.to_string(),
            };
            Error::BrokenLink {
                path: path.to_owned(),
                target,
                detail,
            }
        }
        _ => Error::Io {
            path: path.to_owned(),
            source,
        },
    }
}
