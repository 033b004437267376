//! Remote objects mounted at paths: each read through a [`SparseMap`] of what was fetched, in
//! rounds, until a reading used no byte that was not fetched.
//!
//! The engine names no transport: whoever mounts an object (the CLI, for `https://`, `hf://`…)
//! supplies a [`RemoteObject`] that reads byte ranges. Every fetch is counted against one
//! run-wide budget ([`set_limits`]).

use super::object::{ListedObject, RemoteError, RemoteLimits, RemoteObject, RemoteStats};
use super::ranges::Ranges;
use super::sparse::{page_aligned, page_size, SparseMap};
use crate::error::{Error, RemoteBound, Result};
use crate::HostBuffer;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::time::{Duration, Instant};

/// The first bytes fetched of every object before any reading: a safetensors header, a
/// pickle's start, a `.npy` or GGUF header lie there. Anything else (a zip's end records) is
/// fetched when a reading reaches it.
const HEAD: u64 = 128 << 10;
/// A missing byte is fetched with the aligned block around it: readers read near where they
/// last read.
const READ_AHEAD: u64 = 64 << 10;

static MOUNTS: RwLock<BTreeMap<PathBuf, Arc<Mounted>>> = RwLock::new(BTreeMap::new());
static LIMITS: RwLock<RemoteLimits> = RwLock::new(RemoteLimits {
    max_bytes: 256 << 20,
    max_requests: 10_000,
});
static BYTES: AtomicU64 = AtomicU64::new(0);
static REQUESTS: AtomicU64 = AtomicU64::new(0);
/// When the run's remote reading must end (`--remote-deadline`), and the limit it was set from.
static DEADLINE: RwLock<Option<(Instant, Duration)>> = RwLock::new(None);

#[derive(Debug)]
pub(crate) struct Mounted {
    path: PathBuf,
    object: Arc<dyn RemoteObject>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Fetched bytes by offset: page-aligned, disjoint.
    chunks: BTreeMap<u64, Vec<u8>>,
    filled: Ranges,
    /// Pages that buffers since dropped read without their being fetched.
    missing: Ranges,
    buffers: Vec<Weak<HostBuffer>>,
    primed: bool,
    /// Whether the whole object was fetched and checked against its listed SHA-256.
    verified: bool,
    bytes_read: u64,
    requests: u64,
}

/// A sparse buffer's bytes and the object they are of; dropping it records what it read
/// without its being fetched.
#[derive(Debug)]
pub(crate) struct Backed {
    pub(crate) map: SparseMap,
    mounted: Arc<Mounted>,
}

impl Drop for Backed {
    fn drop(&mut self) {
        let touched = self.map.touched();
        let mut state = self.mounted.lock();
        for range in touched.iter() {
            state.missing.insert(range);
        }
    }
}

/// Makes `path` read `object`'s bytes wherever tensorplay reads a file: every path beneath a
/// mounted one's parent directories is a directory. Mounting a path again replaces its object.
pub fn mount(path: impl Into<PathBuf>, object: Arc<dyn RemoteObject>) {
    let path = path.into();
    let mounted = Arc::new(Mounted {
        path: path.clone(),
        object,
        state: Mutex::default(),
    });
    MOUNTS
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path, mounted);
}

/// Starts a run's remote reading: its bounds, nothing fetched or requested yet (a Python
/// session's second audit does not inherit the first one's counts), and `deadline` from now,
/// past which every request is refused before it is sent.
pub fn begin_run(limits: RemoteLimits, deadline: Duration) {
    *LIMITS.write().unwrap_or_else(|e| e.into_inner()) = limits;
    BYTES.store(0, Ordering::Relaxed);
    REQUESTS.store(0, Ordering::Relaxed);
    // A limit too large to add is no deadline at all.
    *DEADLINE.write().unwrap_or_else(|e| e.into_inner()) = Instant::now()
        .checked_add(deadline)
        .map(|at| (at, deadline));
}

/// Counts what was fetched outside any object's reads (a listing's pages) against the run's
/// limits: `requests` requests and `bytes` bytes. Refused, naming the bound, once past them or
/// past the run's deadline.
pub fn charge(path: &Path, requests: u64, bytes: u64) -> Result<()> {
    let deadline = *DEADLINE.read().unwrap_or_else(|e| e.into_inner());
    if let Some((at, limit)) = deadline {
        let now = Instant::now();
        if now >= at {
            let taken = limit.saturating_add(now.duration_since(at));
            return Err(Error::RemoteBudget {
                path: path.to_owned(),
                bound: RemoteBound::Deadline,
                // Whole seconds, rounded up: never less than the limit passed.
                needed: taken.as_secs() + u64::from(taken.subsec_nanos() > 0),
                limit: limit.as_secs(),
            });
        }
    }
    let limits = *LIMITS.read().unwrap_or_else(|e| e.into_inner());
    let made = REQUESTS
        .fetch_add(requests, Ordering::Relaxed)
        .saturating_add(requests);
    let total = BYTES
        .fetch_add(bytes, Ordering::Relaxed)
        .saturating_add(bytes);
    let over = if made > limits.max_requests {
        Some((RemoteBound::Requests, made, limits.max_requests))
    } else if total > limits.max_bytes {
        Some((RemoteBound::Bytes, total, limits.max_bytes))
    } else {
        None
    };
    match over {
        Some((bound, needed, limit)) => Err(Error::RemoteBudget {
            path: path.to_owned(),
            bound,
            needed,
            limit,
        }),
        None => Ok(()),
    }
}

/// Bytes the run may still fetch within `--max-remote-bytes`.
pub fn bytes_left() -> u64 {
    let limits = *LIMITS.read().unwrap_or_else(|e| e.into_inner());
    limits
        .max_bytes
        .saturating_sub(BYTES.load(Ordering::Relaxed))
}

/// What was read of the object mounted at `path`.
pub fn stats(path: &Path) -> Option<RemoteStats> {
    let mounted = mounted(path)?;
    let state = mounted.lock();
    Some(RemoteStats {
        len: mounted.object.size(),
        bytes_read: state.bytes_read,
        requests: state.requests,
    })
}

/// What was read of every object at or under `root`, together; `None` when there is none.
pub fn stats_under(root: &Path) -> Option<RemoteStats> {
    let mut total: Option<RemoteStats> = None;
    for mounted in mounted_under(root) {
        let state = mounted.lock();
        let sum = total.get_or_insert(RemoteStats {
            len: 0,
            bytes_read: 0,
            requests: 0,
        });
        sum.len = sum.len.saturating_add(mounted.object.size());
        sum.bytes_read += state.bytes_read;
        sum.requests += state.requests;
    }
    total
}

/// Every object mounted at or under `root`, with its listed size and SHA-256, by path.
pub fn listed_under(root: &Path) -> Vec<ListedObject> {
    mounted_under(root)
        .into_iter()
        .map(|mounted| ListedObject {
            path: mounted.path.clone(),
            size: mounted.object.size(),
            sha256: mounted.object.listed_sha256(),
        })
        .collect()
}

/// Every byte of the object mounted at `path`, fetched within the run's remote budget (what
/// was fetched already is not fetched again) and, when its listing gives a SHA-256, checked
/// against it. For a file read whole, not through a reader (a signature, a file to hash).
pub fn read_whole(path: &Path) -> Result<Vec<u8>> {
    let mounted = mounted(path).ok_or_else(|| Error::Remote {
        path: path.to_owned(),
        detail: "not a remote object of this run".to_owned(),
    })?;
    let len = mounted.object.size();
    if len == 0 {
        return Ok(Vec::new());
    }
    let mut all = Ranges::default();
    all.insert(0..len);
    mounted.fetch_exact(&all)?;
    let state = mounted.lock();
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    for (start, chunk) in &state.chunks {
        if *start != out.len() as u64 {
            return Err(Error::RemoteInconsistent {
                path: path.to_owned(),
                detail: format!("bytes from {} on were not fetched", out.len()),
            });
        }
        out.extend_from_slice(chunk);
    }
    if out.len() as u64 != len {
        return Err(Error::RemoteInconsistent {
            path: path.to_owned(),
            detail: format!("{} bytes fetched of the {len} listed", out.len()),
        });
    }
    Ok(out)
}

/// Whether `path` is a mounted object or lies above one.
pub fn is_remote(path: &Path) -> bool {
    mounted(path).is_some() || is_dir(path)
}

/// Runs `work` until it reads no byte of an object mounted at or under `root` that was not
/// fetched: after each run, what it read without its being fetched is fetched, and the run's
/// result thrown away. Only a run that used fetched bytes alone is returned. For local paths,
/// `work` runs once.
pub fn settle<T>(root: &Path, mut work: impl FnMut() -> T) -> Result<T> {
    if !is_remote(root) {
        return Ok(work());
    }
    loop {
        let out = work();
        let missing = missing_under(root);
        if missing.is_empty() {
            return Ok(out);
        }
        // The result rests on zeros that stood for bytes not yet fetched.
        drop(out);
        for (mounted, ranges) in missing {
            mounted.fetch(&ranges)?;
        }
    }
}

pub(super) fn mounted(path: &Path) -> Option<Arc<Mounted>> {
    MOUNTS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(path)
        .cloned()
}

/// Whether some object is mounted beneath `path`.
pub(super) fn is_dir(path: &Path) -> bool {
    let mounts = MOUNTS.read().unwrap_or_else(|e| e.into_inner());
    let found = mounts
        .range(path.to_path_buf()..)
        .next()
        .is_some_and(|(p, _)| p != path && p.starts_with(path));
    found
}

/// The entries directly beneath `dir`: mounted objects and the directories above deeper ones.
pub(super) fn children(dir: &Path) -> Option<Vec<PathBuf>> {
    let mounts = MOUNTS.read().unwrap_or_else(|e| e.into_inner());
    let mut out: Vec<PathBuf> = Vec::new();
    for path in mounts.keys().filter(|p| *p != dir && p.starts_with(dir)) {
        let rest = path.strip_prefix(dir).ok()?;
        let first = rest.components().next()?;
        let child = dir.join(first);
        if out.last() != Some(&child) {
            out.push(child);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Every object mounted at or under `root`.
fn mounted_under(root: &Path) -> Vec<Arc<Mounted>> {
    MOUNTS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(p, _)| p.starts_with(root))
        .map(|(_, m)| Arc::clone(m))
        .collect()
}

/// Every object at or under `root` with the pages its buffers read unfetched, which are
/// forgotten as missing once returned (they are about to be fetched).
fn missing_under(root: &Path) -> Vec<(Arc<Mounted>, Ranges)> {
    mounted_under(root)
        .into_iter()
        .filter_map(|mounted| {
            let live: Vec<Arc<HostBuffer>> = {
                let mut state = mounted.lock();
                state.buffers.retain(|b| b.strong_count() > 0);
                state.buffers.iter().filter_map(Weak::upgrade).collect()
            };
            let mut touched = Ranges::default();
            for buffer in &live {
                if let Some(ranges) = buffer.unfetched_reads() {
                    touched.extend(&ranges);
                }
            }
            // Dropping the last handle on a buffer outside the lock records its reads there.
            drop(live);
            let mut state = mounted.lock();
            let missing = std::mem::take(&mut state.missing);
            touched.extend(&missing);
            let touched = touched.subtract(&state.filled);
            drop(state);
            (!touched.is_empty()).then_some((mounted, touched))
        })
        .collect()
}

impl Mounted {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A buffer over the object's whole length with everything fetched so far in place; the
    /// first one fetches the object's head.
    pub(super) fn open(self: &Arc<Self>) -> Result<Arc<HostBuffer>> {
        let len = self.object.size();
        if len == 0 {
            return Err(Error::Empty {
                path: self.path.clone(),
            });
        }
        if !self.lock().primed {
            let mut first = Ranges::default();
            first.insert(0..HEAD.min(len));
            self.fetch_exact(&first)?;
            self.lock().primed = true;
        }
        let mut state = self.lock();
        let map = SparseMap::new(
            len,
            state
                .chunks
                .iter()
                .map(|(start, bytes)| (*start, bytes.as_slice())),
            state.filled.clone(),
        )
        .map_err(|source| Error::Io {
            path: self.path.clone(),
            source,
        })?;
        let buffer = HostBuffer::remote(
            self.path.clone(),
            Backed {
                map,
                mounted: Arc::clone(self),
            },
        );
        state.buffers.push(Arc::downgrade(&buffer));
        Ok(buffer)
    }

    /// Fetches the blocks around `ranges` that are not fetched yet.
    fn fetch(&self, ranges: &Ranges) -> Result<()> {
        let len = self.object.size();
        let mut wanted = Ranges::default();
        for range in ranges.iter() {
            let start = range.start - range.start % READ_AHEAD;
            let end = range.end.div_ceil(READ_AHEAD).saturating_mul(READ_AHEAD);
            wanted.insert(start..end.min(len));
        }
        self.fetch_exact(&wanted)
    }

    /// Fetches `ranges`, widened to pages, less what is fetched already: one request a range.
    fn fetch_exact(&self, ranges: &Ranges) -> Result<()> {
        let len = self.object.size();
        let page = page_size() as u64;
        let mut wanted = Ranges::default();
        for range in ranges.iter() {
            wanted.insert(page_aligned(range, len, page));
        }
        let wanted = wanted.subtract(&self.lock().filled);
        for range in wanted.iter() {
            self.charge(range.end - range.start)?;
            let bytes = self.object.read_range(range.clone()).map_err(|e| match e {
                RemoteError::Unreachable(detail) => Error::Remote {
                    path: self.path.clone(),
                    detail,
                },
                RemoteError::Inconsistent(detail) => Error::RemoteInconsistent {
                    path: self.path.clone(),
                    detail,
                },
            })?;
            if bytes.len() as u64 != range.end - range.start {
                return Err(Error::RemoteInconsistent {
                    path: self.path.clone(),
                    detail: format!(
                        "asked for bytes {}..{}, received {}",
                        range.start,
                        range.end,
                        bytes.len()
                    ),
                });
            }
            let mut state = self.lock();
            state.bytes_read += bytes.len() as u64;
            state.requests += 1;
            // Another reader of the same object may have fetched some of it meanwhile: chunks
            // stay disjoint, so the copy fetched second is dropped.
            let mut fresh = Ranges::default();
            fresh.insert(range.clone());
            if fresh.subtract(&state.filled) == fresh {
                state.filled.insert(range.clone());
                state.chunks.insert(range.start, bytes);
            }
        }
        self.verify()
    }

    /// Counts one request of `bytes` against the run's limits, or refuses it.
    fn charge(&self, bytes: u64) -> Result<()> {
        charge(&self.path, 1, bytes)
    }

    /// Once every byte of an object with a listed SHA-256 is fetched, checks that they hash to
    /// it: a store serving other bytes under the listed address is not the object listed.
    fn verify(&self) -> Result<()> {
        let Some(listed) = self.object.listed_sha256() else {
            return Ok(());
        };
        let mut state = self.lock();
        let mut whole = Ranges::default();
        whole.insert(0..self.object.size());
        if state.verified || !whole.subtract(&state.filled).is_empty() {
            return Ok(());
        }
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for chunk in state.chunks.values() {
            hasher.update(chunk);
        }
        let got: [u8; 32] = hasher.finalize().into();
        if got != listed {
            let hex = |d: &[u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
            return Err(Error::RemoteInconsistent {
                path: self.path.clone(),
                detail: format!(
                    "its bytes hash to SHA-256 {}, not the {} its listing gives (the Hub's \
                     lfs.oid): the store served other content under that address",
                    hex(&got),
                    hex(&listed)
                ),
            });
        }
        state.verified = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // The only test of this binary that touches the run's counts, so none races it.
    #[test]
    fn a_run_begins_with_nothing_counted_and_ends_at_its_deadline() {
        let limits = RemoteLimits {
            max_bytes: 10,
            max_requests: 5,
        };
        let path = Path::new("hf://org/model/w.safetensors");
        let over = |r: Result<()>, want: RemoteBound| matches!(r, Err(Error::RemoteBudget { bound, .. }) if bound == want);
        begin_run(limits, Duration::from_secs(60));
        charge(path, 1, 10).expect("within the budget");
        assert!(over(charge(path, 1, 1), RemoteBound::Bytes));
        // A second run in the same process (a Python session's next audit) starts afresh.
        begin_run(limits, Duration::from_secs(60));
        charge(path, 1, 10).expect("a new run's budget");
        begin_run(limits, Duration::ZERO);
        assert!(over(charge(path, 1, 0), RemoteBound::Deadline));
    }
}
