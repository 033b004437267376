//! `torch.distributed.checkpoint` directories: a `.metadata` file (a plain pickle that locates
//! every item) beside `*.distcp` files (the items, each `torch.save`d one after another, which
//! `dcp.load` reads back with `torch.load(weights_only=False)`). No reader reads them yet, so
//! such a directory is one checkpoint that fails as unreadable, and a `.distcp` file alone is
//! refused rather than read as if it were a whole checkpoint.

use crate::error::Error;
use std::path::{Path, PathBuf};

/// The file that locates every item.
const METADATA: &str = ".metadata";

/// The extension of the files that hold the items.
const EXTENSION: &str = "distcp";

/// The files that make `dir` a torch.distributed.checkpoint directory, `.metadata` first and
/// then every `.distcp` file in name order; `None` when it is not one or cannot be listed.
pub fn parts(dir: &Path) -> Option<Vec<PathBuf>> {
    let metadata = dir.join(METADATA);
    if !metadata.is_file() {
        return None;
    }
    let mut parts: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| is_part(p) && p.is_file())
        .collect();
    if parts.is_empty() {
        return None;
    }
    parts.sort();
    parts.insert(0, metadata);
    Some(parts)
}

/// Whether `path` names a `.distcp` file, which is never a checkpoint on its own.
pub fn is_part(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == EXTENSION)
}

/// Why `path` is not read: a whole directory, or one `.distcp` file of one.
pub(super) fn refusal(path: &Path) -> Option<Error> {
    if is_part(path) {
        return Some(Error::DistributedCheckpointPart {
            path: path.to_owned(),
        });
    }
    if !path.is_dir() {
        return None;
    }
    parts(path).map(|parts| Error::DistributedCheckpoint {
        path: path.to_owned(),
        distcp: parts.len() - 1,
    })
}
