//! A progress line for long deep scans, on a terminal only: bytes scanned of the total, the
//! percentage and bytes/s.
//!
//! The total is the size on disk of the checkpoints (an index counts its shards), known from
//! the file system before any is read. The scan counts only the floating tensors' bytes, so
//! the total is an upper bound and the percentage errs low (headers, integer tensors and
//! strided views are not counted); the floating bytes themselves are known only once every
//! checkpoint has been parsed, too late for a bar drawn while they are.

use crate::discover::Target;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tensorplay_engine::load::ShardIndex;

const TEMPLATE: &str =
    "{spinner} scanning tensor bytes: {binary_bytes}/{binary_total_bytes} ({percent}%) {binary_bytes_per_sec}";

/// Draws while the audit runs; dropped, it clears its line.
pub struct Progress {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// A display of `counter` out of the `targets`' bytes on stderr when it is a terminal and
    /// not in CI mode; else `None`.
    pub fn start(counter: &Arc<AtomicU64>, targets: &[Target], ci_mode: bool) -> Option<Progress> {
        if ci_mode || !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::new(planned_bytes(targets));
        bar.set_style(
            ProgressStyle::with_template(TEMPLATE).unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let done = Arc::new(AtomicBool::new(false));
        let (stop, counter) = (Arc::clone(&done), Arc::clone(counter));
        let thread = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                bar.set_position(counter.load(Ordering::Relaxed));
                bar.tick();
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        Some(Progress {
            done,
            thread: Some(thread),
        })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Bytes on disk of the checkpoints to audit: each file's size, an index's shards' sizes.
/// Unreadable files count as nothing (their audit reports them).
pub fn planned_bytes(targets: &[Target]) -> u64 {
    targets.iter().map(|t| on_disk(t.path())).sum()
}

fn on_disk(path: &Path) -> u64 {
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    match is_json.then(|| ShardIndex::read(path).ok()).flatten() {
        Some(index) => index
            .shards()
            .into_iter()
            .map(|shard| size(&ShardIndex::shard_path(path, shard)))
            .sum(),
        None => size(path),
    }
}

#[cfg(test)]
mod tests {
    use super::on_disk;
    use std::path::Path;

    #[test]
    fn an_index_counts_its_shards_and_a_file_its_size() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/pytorch");
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let file = root.join("state_dict.pt");
        assert_eq!(on_disk(&file), size(&file));
        let dir = root.join("sharded");
        let shards: u64 = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "bin"))
            .map(|p| size(&p))
            .sum();
        assert!(shards > 0);
        assert_eq!(on_disk(&dir.join("pytorch_model.bin.index.json")), shards);
    }

    #[test]
    fn the_template_is_valid() {
        assert!(indicatif::ProgressStyle::with_template(super::TEMPLATE).is_ok());
    }
}
