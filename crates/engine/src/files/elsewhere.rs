//! The read layer where remote objects cannot be read (no Linux `mincore` to watch a sparse
//! map with): nothing is ever mounted, so every path is local. The remote crate refuses remote
//! paths on these systems before anything is mounted.

use super::object::{ListedObject, RemoteLimits, RemoteObject, RemoteStats};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Mounts nothing: remote objects are not read on this system.
pub fn mount(_path: impl Into<PathBuf>, _object: Arc<dyn RemoteObject>) {}

/// Nothing to bound: remote objects are not read on this system.
pub fn begin_run(_limits: RemoteLimits, _deadline: std::time::Duration) {}

/// Nothing to count: remote objects are not read on this system.
pub fn charge(_path: &Path, _requests: u64, _bytes: u64) -> Result<()> {
    Ok(())
}

/// Unbounded: remote objects are not read on this system.
pub fn bytes_left() -> u64 {
    u64::MAX
}

/// `None`: nothing is mounted.
pub fn stats(_path: &Path) -> Option<RemoteStats> {
    None
}

/// `None`: nothing is mounted.
pub fn stats_under(_root: &Path) -> Option<RemoteStats> {
    None
}

/// `false`: nothing is mounted.
pub fn is_remote(_path: &Path) -> bool {
    false
}

/// Runs `work` once: every path is local.
pub fn settle<T>(_root: &Path, mut work: impl FnMut() -> T) -> Result<T> {
    Ok(work())
}

/// Nothing: nothing is mounted.
pub fn listed_under(_root: &Path) -> Vec<ListedObject> {
    Vec::new()
}

/// Refused: nothing is mounted, so `path` is no remote object.
pub fn read_whole(path: &Path) -> Result<Vec<u8>> {
    Err(Error::Remote {
        path: path.to_owned(),
        detail: "remote objects are read on Linux only".to_owned(),
    })
}
