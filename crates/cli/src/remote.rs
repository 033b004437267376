//! Remote paths on the command line: mounted in the engine's read layer before anything reads
//! them, then handled like local paths.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tensorplay_audit::report::RemoteFacts;
use tensorplay_audit::text::{human_bytes, plural, printable};
use tensorplay_engine::files::{self, RemoteLimits, RemoteStats};

/// How remote paths are read, from the flags every reading command shares.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoteArgs {
    /// Read plain http:// URLs beyond loopback addresses too (also TENSORPLAY_ALLOW_HTTP=1).
    #[arg(long)]
    allow_http: bool,
    /// Bytes all remote reads of the run may fetch; a checkpoint needing more fails TP506
    /// (over-budget).
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size, default_value = "256MiB")]
    max_remote_bytes: u64,
    /// Requests the run may send in all (ranges, their retries, listings); a checkpoint needing
    /// more fails TP506.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_requests: u64,
    /// Entries one remote listing (a Hub repository, an S3, Azure or GCS prefix) may hold; a
    /// larger one is refused unjudged.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_remote_files: usize,
    /// Seconds one remote request may take before it is retried (and, after its retries,
    /// fails the checkpoint unjudged).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    request_timeout: u64,
    /// How long the run's remote reading may go on in all, from its first request: seconds, or
    /// with units (10m, 1h). Past it no further request is sent: a checkpoint still to be read
    /// fails TP506, a listing not yet read is refused unjudged.
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration, default_value = "1h")]
    remote_deadline: Duration,
    /// The run's remote reading, once begun (at its first remote path, where the deadline
    /// starts). Kept with the run's flags, so that each run (of a Python session's many) has
    /// its own counts, deadline and mounts, and ends with them (copies share it).
    #[arg(skip)]
    begun: Arc<OnceLock<files::RunGuard>>,
}

impl RemoteArgs {
    /// The path to read for `path`: a remote one mounted (its files listed, its revision
    /// resolved), a local one as it is.
    pub fn resolve(&self, path: &Path) -> anyhow::Result<PathBuf> {
        let arg = path.to_string_lossy();
        if !tensorplay_remote::is_remote(&arg) {
            return Ok(path.to_owned());
        }
        // The run's first remote path starts its reading afresh: the counts, the deadline
        // and the notes are this run's, however many ran before it in this process.
        self.begun.get_or_init(|| {
            let limits = RemoteLimits {
                max_bytes: self.max_remote_bytes,
                max_requests: self.max_requests,
            };
            let run = files::begin_run(limits, self.remote_deadline);
            MOUNTED.lock().unwrap_or_else(|e| e.into_inner()).clear();
            CHECKPOINTS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clear();
            run
        });
        let mut options = tensorplay_remote::Options::from_env();
        options.allow_http |= self.allow_http;
        options.timeout = Duration::from_secs(self.request_timeout);
        options.max_files = self.max_remote_files;
        let Some(mounted) = tensorplay_remote::mount(&arg, &options)? else {
            return Ok(path.to_owned());
        };
        MOUNTED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(mounted.clone());
        Ok(mounted)
    }
}

/// What was fetched of the objects `parts` (a checkpoint's files), together, and whether
/// their tensor values were read; `None` when none is remote. The parts are kept for the
/// run's notes: a sharded index's note counts its shards.
pub fn facts(parts: &[PathBuf], values_read: bool) -> Option<RemoteFacts> {
    if parts.iter().any(|part| files::stats(part).is_some()) {
        CHECKPOINTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(parts.to_vec());
    }
    parts
        .iter()
        .filter_map(|part| files::stats(part))
        .fold(None, |sum: Option<RemoteFacts>, s| {
            let sum = sum.unwrap_or(RemoteFacts {
                size: 0,
                bytes_read: 0,
                requests: 0,
                values_read,
            });
            Some(RemoteFacts {
                size: sum.size.saturating_add(s.len),
                bytes_read: sum.bytes_read.saturating_add(s.bytes_read),
                requests: sum.requests.saturating_add(s.requests),
                values_read,
            })
        })
}

/// The remote paths this run mounted, as they resolved.
static MOUNTED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// The files of each remote checkpoint the run audited: an index and its shards together.
static CHECKPOINTS: Mutex<Vec<Vec<PathBuf>>> = Mutex::new(Vec::new());

/// For each remote path of the run, what was read of it and of the files its checkpoints are
/// made of (a sharded index's shards, which lie beside it): "hf://org/model@…: read 31.0 MiB of
/// 756.0 GiB in 412 requests".
pub fn read_notes() -> Vec<String> {
    let mounted = MOUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let checkpoints = CHECKPOINTS.lock().unwrap_or_else(|e| e.into_inner());
    mounted
        .iter()
        .filter_map(|path| {
            let mut objects: BTreeSet<PathBuf> = files::listed_under(path)
                .into_iter()
                .map(|listed| listed.path)
                .collect();
            for parts in checkpoints.iter() {
                if parts.iter().any(|part| part.starts_with(path)) {
                    objects.extend(parts.iter().cloned());
                }
            }
            let stats = objects
                .iter()
                .filter_map(|object| files::stats(object))
                .reduce(|sum, s| RemoteStats {
                    len: sum.len.saturating_add(s.len),
                    bytes_read: sum.bytes_read.saturating_add(s.bytes_read),
                    requests: sum.requests.saturating_add(s.requests),
                })?;
            Some(format!(
                "{}: read {} of {} in {}",
                printable(&path.display().to_string(), false),
                human_bytes(stats.bytes_read),
                human_bytes(stats.len),
                plural(stats.requests as usize, "request"),
            ))
        })
        .collect()
}
