//! What the read layer asks of a remote object and says of it: the types every platform
//! builds, whether or not it can read remote objects.

use std::ops::Range;

/// One object of a remote store, read by byte ranges.
pub trait RemoteObject: Send + Sync + std::fmt::Debug {
    /// Its length in bytes, as the store listed it.
    fn size(&self) -> u64;

    /// Exactly the bytes of `range` (inside `0..size()`), or why not. A store must refuse an
    /// answer that is not those bytes (a whole body for a range, a short body, another version
    /// of the object) rather than return it.
    fn read_range(&self, range: Range<u64>) -> std::result::Result<Vec<u8>, RemoteError>;

    /// The SHA-256 the store's listing gives for the whole object (a Hub file's `lfs.oid`),
    /// if any: once every byte has been fetched, the bytes must hash to it.
    fn listed_sha256(&self) -> Option<[u8; 32]> {
        None
    }

    /// Requests sent again after a failed attempt (a 429, a 5xx, a broken transfer), beyond
    /// the one each read is: each is a request the server was sent, counted in the object's.
    fn retries(&self) -> u64 {
        0
    }
}

/// Why a remote read failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    /// The store could not be reached or refused the request (status, timeout, truncated
    /// transfer after retries): nothing can be said about the object.
    #[error("{0}")]
    Unreachable(String),
    /// The store answered with bytes that cannot be the object's: it changed between reads,
    /// or the answer was not the range asked for.
    #[error("{0}")]
    Inconsistent(String),
    /// A further attempt would pass the run's remote budget: not sent.
    #[error("a retry would pass {}", .bound.flag())]
    Budget {
        /// Which bound.
        bound: crate::error::RemoteBound,
        /// What the run would have taken with it.
        needed: u64,
        /// The bound's value.
        limit: u64,
    },
}

/// The run-wide bounds on remote reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteLimits {
    /// Bytes fetched in all, over every object.
    pub max_bytes: u64,
    /// Range requests made in all.
    pub max_requests: u64,
}

impl Default for RemoteLimits {
    fn default() -> Self {
        RemoteLimits {
            max_bytes: 256 << 20,
            max_requests: 10_000,
        }
    }
}

/// What was read of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteStats {
    /// The object's length.
    pub len: u64,
    /// Bytes fetched.
    pub bytes_read: u64,
    /// Range requests made.
    pub requests: u64,
}

/// One object mounted under a directory, as its store listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// Where it is mounted.
    pub path: std::path::PathBuf,
    /// Its length, as listed.
    pub size: u64,
    /// The SHA-256 its listing gives (a Hub file's `lfs.oid`), if any.
    pub sha256: Option<[u8; 32]>,
}
