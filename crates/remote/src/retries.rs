//! Range requests sent again after a failed attempt (a 429, a 5xx, a broken transfer). The read
//! layer charges one request for a range before asking for it; each further attempt is a request
//! the server is sent all the same, so it is charged here before it is sent, and kept per object
//! for the run's notes, which count the requests a read took.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tensorplay_engine::files::{self, RemoteObject};

/// The further attempts of one object's range reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct Retries(Arc<AtomicU64>);

impl Retries {
    /// Charges one more attempt to `path` against the run's limits, then counts it; refused,
    /// naming the bound, once past them (the attempt is then not sent).
    pub(crate) fn charge(&self, path: &Path) -> tensorplay_engine::Result<()> {
        files::charge(path, 1, 0)?;
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Each mounted object's retries, by the path it is mounted at.
static MOUNTED: Mutex<Option<HashMap<PathBuf, Retries>>> = Mutex::new(None);

/// Mounts `object` at `path` in the read layer, its retries counted under that path (afresh:
/// a path mounted again is a new object of a new run).
pub(crate) fn mount(path: PathBuf, object: Arc<dyn RemoteObject>, retries: Retries) {
    MOUNTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(path.clone(), retries);
    files::mount(path, object);
}

/// Range requests the object mounted at `path` was sent again after failed attempts, since it
/// was mounted: requests of its reads beyond the one each read is counted as.
pub fn retried(path: &Path) -> u64 {
    MOUNTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|mounted| mounted.get(path))
        .map_or(0, |retries| retries.0.load(Ordering::Relaxed))
}
