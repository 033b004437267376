//! A progress line for long deep scans, on a terminal only: bytes scanned and bytes/s.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Draws while the audit runs; dropped, it clears its line.
pub struct Progress {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// A display of `counter` on stderr when it is a terminal and not in CI mode; else `None`.
    pub fn start(counter: &Arc<AtomicU64>, ci_mode: bool) -> Option<Progress> {
        if ci_mode || !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} scanning tensor bytes: {bytes} ({bytes_per_sec})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
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
