//! The memory-bandwidth yardstick `scripts/bench.py` measures the deep scan against: the
//! file mapped as tensorplay maps it and every byte read once by two threads, each summing
//! its half as 64-bit words. Usage: `mapped_sum FILE`; prints the sum (so nothing is skipped).

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: mapped_sum FILE");
        return ExitCode::from(2);
    };
    let map = match std::fs::File::open(&path).and_then(|file| {
        // SAFETY: read-only map of a file this program never writes.
        unsafe { memmap2::Mmap::map(&file) }
    }) {
        Ok(map) => map,
        Err(e) => {
            eprintln!("{}: {e}", path.to_string_lossy());
            return ExitCode::from(2);
        }
    };
    let half = map.len() / 2;
    let (a, b) = map.split_at(half);
    let sum = |bytes: &[u8]| -> u64 {
        let (words, rest) = bytes.as_chunks::<8>();
        let words = words
            .iter()
            .fold(0u64, |acc, w| acc.wrapping_add(u64::from_le_bytes(*w)));
        rest.iter()
            .fold(words, |acc, &b| acc.wrapping_add(u64::from(b)))
    };
    let total = std::thread::scope(|s| {
        let first = s.spawn(|| sum(a));
        let second = sum(b);
        first.join().unwrap_or(0).wrapping_add(second)
    });
    println!("{total}");
    ExitCode::SUCCESS
}
