//! A run's remote reading as a value: its budget, and the objects it mounted at paths. Every
//! object's fetches are charged to the budget of the run that mounted it; ending the run (a
//! new one beginning, or the [`RunGuard`] of the one begun going) drops its mounts and, once
//! no checkpoint read from them is held either, every byte fetched of them.
//!
//! Readers name paths, not runs: a path is looked up in the current run, the one begun last.

use super::object::{ListedObject, RemoteLimits, RemoteObject, RemoteStats};
use super::remote::RemoteBytes;
use crate::error::{Error, RemoteBound, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// One run's remote reading.
#[derive(Debug, Default)]
struct Run {
    budget: Arc<Budget>,
    mounts: RwLock<BTreeMap<PathBuf, Arc<RemoteBytes>>>,
}

/// What a run may fetch, and what it has.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    limits: RemoteLimits,
    bytes: AtomicU64,
    requests: AtomicU64,
    /// When the run's remote reading must end (`--remote-deadline`), and the limit it was set
    /// from; `None` for no deadline.
    deadline: Option<(Instant, Duration)>,
    /// Prefetch requests in flight beside the readings' own ([`Budget::begin_prefetch`]).
    prefetching: AtomicUsize,
}

/// The most prefetch requests a run keeps in flight beside its readings' own: files read side
/// by side (`--jobs`) do not each add a prefetch's worth to what one store is sent at once.
const PREFETCHING: usize = 16;

/// The run paths are looked up in.
static CURRENT: RwLock<Option<Arc<Run>>> = RwLock::new(None);

/// Keeps the run [`begin_run`] began current; dropping it ends that run (unless another began
/// since), with its mounts.
#[derive(Debug)]
#[must_use = "the run ends when its guard is dropped"]
pub struct RunGuard(Arc<Run>);

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut current = CURRENT.write().unwrap_or_else(|e| e.into_inner());
        if current
            .as_ref()
            .is_some_and(|run| Arc::ptr_eq(run, &self.0))
        {
            *current = None;
        }
    }
}

/// Begins a run's remote reading: its bounds, nothing fetched or requested yet (a Python
/// session's second audit does not inherit the first one's counts or mounts), and `deadline`
/// from now, past which every request is refused before it is sent.
pub fn begin_run(limits: RemoteLimits, deadline: Duration) -> RunGuard {
    let run = Arc::new(Run {
        budget: Arc::new(Budget::new(limits, deadline)),
        mounts: RwLock::default(),
    });
    *CURRENT.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&run));
    RunGuard(run)
}

/// The current run; one with the default bounds and no deadline when none was begun (a
/// library caller mounting objects itself), kept until one is.
fn current() -> Arc<Run> {
    if let Some(run) = CURRENT.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return Arc::clone(run);
    }
    let mut current = CURRENT.write().unwrap_or_else(|e| e.into_inner());
    Arc::clone(current.get_or_insert_with(Arc::default))
}

/// Makes `path` read `object`'s bytes wherever tensorplay reads a file, within the current
/// run's budget: every path beneath a mounted one's parent directories is a directory.
/// Mounting a path again replaces its object.
pub fn mount(path: impl Into<PathBuf>, object: Arc<dyn RemoteObject>) {
    let run = current();
    let path = path.into();
    let mounted = Arc::new(RemoteBytes::new(
        path.clone(),
        object,
        Arc::clone(&run.budget),
    ));
    run.mounts
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path, mounted);
}

/// Counts what was fetched outside any object's reads (a listing's pages, a retry) against the
/// current run's limits: `requests` requests and `bytes` bytes. Refused, naming the bound, once
/// past them or past the run's deadline.
pub fn charge(path: &Path, requests: u64, bytes: u64) -> Result<()> {
    current().budget.charge(path, requests, bytes)
}

/// Bytes the current run may still fetch within `--max-remote-bytes`.
pub fn bytes_left() -> u64 {
    current().budget.left()
}

impl Budget {
    /// `limits`, and `deadline` from now.
    pub(crate) fn new(limits: RemoteLimits, deadline: Duration) -> Budget {
        Budget {
            limits,
            // A limit too large to add is no deadline at all.
            deadline: Instant::now()
                .checked_add(deadline)
                .map(|at| (at, deadline)),
            ..Budget::default()
        }
    }

    /// Counts `requests` requests of `bytes` bytes, or refuses them naming the bound.
    pub(crate) fn charge(&self, path: &Path, requests: u64, bytes: u64) -> Result<()> {
        if let Some((at, limit)) = self.deadline {
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
        let made = self
            .requests
            .fetch_add(requests, Ordering::Relaxed)
            .saturating_add(requests);
        let total = self
            .bytes
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        let limits = self.limits;
        let (bound, needed, limit) = if made > limits.max_requests {
            (RemoteBound::Requests, made, limits.max_requests)
        } else if total > limits.max_bytes {
            (RemoteBound::Bytes, total, limits.max_bytes)
        } else {
            return Ok(());
        };
        Err(Error::RemoteBudget {
            path: path.to_owned(),
            bound,
            needed,
            limit,
        })
    }

    /// Bytes still to be fetched within the limit.
    pub(crate) fn left(&self) -> u64 {
        self.limits
            .max_bytes
            .saturating_sub(self.bytes.load(Ordering::Relaxed))
    }

    /// Up to `wanted` more requests to send at once, within [`PREFETCHING`] over the run: the
    /// number granted, to give back with [`Budget::end_prefetch`].
    pub(crate) fn begin_prefetch(&self, wanted: usize) -> usize {
        let mut granted = 0;
        // The closure always returns `Some`: the update cannot fail.
        let _ = self
            .prefetching
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                granted = wanted.min(PREFETCHING.saturating_sub(now));
                Some(now + granted)
            });
        granted
    }

    /// Gives back what [`Budget::begin_prefetch`] granted.
    pub(crate) fn end_prefetch(&self, granted: usize) {
        self.prefetching.fetch_sub(granted, Ordering::Relaxed);
    }

    /// Requests still to be made within the limit.
    pub(crate) fn requests_left(&self) -> u64 {
        self.limits
            .max_requests
            .saturating_sub(self.requests.load(Ordering::Relaxed))
    }
}

/// What was read of the object mounted at `path`.
pub fn stats(path: &Path) -> Option<RemoteStats> {
    mounted(path).map(|mounted| mounted.stats())
}

/// What was read of every object at or under `root`, together; `None` when there is none.
pub fn stats_under(root: &Path) -> Option<RemoteStats> {
    mounted_under(root)
        .into_iter()
        .map(|mounted| mounted.stats())
        .reduce(|sum, one| RemoteStats {
            len: sum.len.saturating_add(one.len),
            bytes_read: sum.bytes_read.saturating_add(one.bytes_read),
            requests: sum.requests.saturating_add(one.requests),
        })
}

/// Every object mounted at or under `root`, with its listed size and SHA-256, by path.
pub fn listed_under(root: &Path) -> Vec<ListedObject> {
    mounted_under(root)
        .into_iter()
        .map(|mounted| mounted.listed())
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
    Ok(mounted.range(0..mounted.len())?.to_vec())
}

/// Whether `path` is a mounted object or lies above one.
pub fn is_remote(path: &Path) -> bool {
    mounted(path).is_some() || is_dir(path)
}

/// `result`, unless a read of an object at or under `root` failed meanwhile where the reading
/// could not say so itself (the whole object or a storage's bytes, asked for infallibly): then
/// that failure, which the result may rest on the absence of. Each failure is told once.
pub fn checked<T>(root: &Path, result: T) -> Result<T> {
    match mounted_under(root).iter().find_map(|m| m.take_failure()) {
        Some(failure) => Err(failure),
        None => Ok(result),
    }
}

pub(super) fn mounted(path: &Path) -> Option<Arc<RemoteBytes>> {
    let run = current();
    let mounts = run.mounts.read().unwrap_or_else(|e| e.into_inner());
    mounts.get(path).cloned()
}

/// Whether some object is mounted beneath `path`.
pub(super) fn is_dir(path: &Path) -> bool {
    let run = current();
    let mounts = run.mounts.read().unwrap_or_else(|e| e.into_inner());
    let found = mounts
        .range(path.to_path_buf()..)
        .next()
        .is_some_and(|(p, _)| p != path && p.starts_with(path));
    found
}

/// The entries directly beneath `dir`: mounted objects and the directories above deeper ones.
pub(super) fn children(dir: &Path) -> Option<Vec<PathBuf>> {
    let run = current();
    let mounts = run.mounts.read().unwrap_or_else(|e| e.into_inner());
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
fn mounted_under(root: &Path) -> Vec<Arc<RemoteBytes>> {
    let run = current();
    let mounts = run.mounts.read().unwrap_or_else(|e| e.into_inner());
    mounts
        .iter()
        .filter(|(p, _)| p.starts_with(root))
        .map(|(_, m)| Arc::clone(m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The only test of this binary that begins runs (the current run is process-wide).
    #[test]
    fn a_run_has_its_own_budget_and_mounts_and_ends_with_its_guard() {
        let limits = RemoteLimits {
            max_bytes: 10,
            max_requests: 5,
        };
        let path = Path::new("hf://org/model/w.safetensors");
        let over = |r: Result<()>, want: RemoteBound| matches!(r, Err(Error::RemoteBudget { bound, .. }) if bound == want);
        let first = begin_run(limits, Duration::from_secs(60));
        charge(path, 1, 10).expect("within the budget");
        assert!(over(charge(path, 1, 1), RemoteBound::Bytes));
        #[derive(Debug)]
        struct Empty;
        impl RemoteObject for Empty {
            fn size(&self) -> u64 {
                0
            }
            fn read_range(
                &self,
                _: std::ops::Range<u64>,
            ) -> std::result::Result<Vec<u8>, super::super::RemoteError> {
                Ok(Vec::new())
            }
        }
        mount(path, Arc::new(Empty));
        assert!(is_remote(path) && is_dir(Path::new("hf://org")));
        // A second run (a Python session's next audit) starts afresh: no counts, no mounts.
        let second = begin_run(limits, Duration::from_secs(60));
        assert!(!is_remote(path));
        charge(path, 1, 10).expect("a new run's budget");
        // The first run's guard going does not end the second.
        drop(first);
        assert!(over(charge(path, 1, 1), RemoteBound::Bytes));
        mount(path, Arc::new(Empty));
        drop(second);
        assert!(!is_remote(path), "its mounts end with the run");
        let _deadline = begin_run(limits, Duration::ZERO);
        assert!(over(charge(path, 1, 0), RemoteBound::Deadline));
    }

    #[test]
    fn prefetches_share_the_run_s_requests_in_flight() {
        let budget = Budget::default();
        assert_eq!(budget.begin_prefetch(7), 7);
        assert_eq!(budget.begin_prefetch(7), 7);
        assert_eq!(budget.begin_prefetch(7), 2);
        assert_eq!(budget.begin_prefetch(7), 0);
        budget.end_prefetch(7);
        assert_eq!(budget.begin_prefetch(3), 3);
    }
}
