//! A partitioned audit's share of one sharded set: the files whose tensor bytes this part
//! scans. Everything else about the set (its index, every shard's metadata, the rules that
//! read no bytes) is judged in full by every part that holds a share, so that the parts'
//! reports agree on it and `merge` only has to put the scans together.

use std::path::{Path, PathBuf};
use tensorplay_engine::Storage;

/// Which storages of a set this part scans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanShare {
    /// The set's files given to this part.
    pub mine: Vec<PathBuf>,
    /// Every file the set was divided into, whichever part has it.
    pub all: Vec<PathBuf>,
    /// Whether this part also scans storages read from none of `all` (bytes built in memory,
    /// a file named otherwise): exactly one part of the set does.
    pub strays: bool,
}

impl ScanShare {
    /// Whether this part scans `storage`'s bytes.
    pub fn scans(&self, storage: &Storage) -> bool {
        match storage.data_ptr().source() {
            Some(source) if self.all.iter().any(|f| same(f, source)) => {
                self.mine.iter().any(|f| same(f, source))
            }
            _ => self.strays,
        }
    }
}

/// The same file, whether or not one path was written with a leading `./`.
fn same(a: &Path, b: &Path) -> bool {
    a == b || a.components().eq(b.components())
}
