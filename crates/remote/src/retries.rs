//! Range requests sent again after a failed attempt (a 429, a 5xx, a broken transfer). The read
//! layer charges one request for a range before asking for it; each further attempt is a request
//! the server is sent all the same, so it is charged here before it is sent, and counted by its
//! object (`RemoteObject::retries`) for the run's notes, which count the requests a read took.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tensorplay_engine::files::{self, RemoteError};

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

    /// The attempts counted so far.
    pub(crate) fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A limit that stopped a retry, as a read's error (naming its flag, TP506 like any other).
pub(crate) fn over(refusal: tensorplay_engine::Error) -> RemoteError {
    match refusal {
        tensorplay_engine::Error::RemoteBudget {
            bound,
            needed,
            limit,
            ..
        } => RemoteError::Budget {
            bound,
            needed,
            limit,
        },
        other => RemoteError::Unreachable(other.to_string()),
    }
}
