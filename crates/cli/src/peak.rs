//! The process's own peak resident memory, for `--verbose`: what a user tuning
//! `--max-memory` compares against the runner's limit.

/// Peak resident set of this process since it started, in bytes (Linux `VmHWM`; `None`
/// elsewhere). Not `getrusage`: its `ru_maxrss` keeps the high-water mark of the process
/// that spawned this one, so a small run started by a large parent reads as large.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn a_running_process_has_a_peak() {
        let peak = super::resident_bytes().expect("VmHWM on Linux");
        // A test binary holds at least its code and stacks, and not a terabyte.
        assert!(peak > 1 << 20 && peak < 1 << 40, "{peak}");
    }
}
