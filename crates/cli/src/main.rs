//! The `tensorplay` binary: the command line of the `tensorplay` library crate.

fn main() -> std::process::ExitCode {
    purge_freed_memory_soon();
    std::process::ExitCode::from(tensorplay::run(std::env::args_os()))
}

/// mimalloc's `mi_option_purge_delay`, the sixteenth of v3's options (`mimalloc.h`); the
/// `-sys` crate's constants name only older ones.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Hands memory the reading freed back to the kernel after 10 ms rather than mimalloc v3's
/// default second. A read builds a stream's values, then the layers, then frees the values:
/// held over, the freed pages add up (a metadata audit of 20 000 torch.save tensors held 58
/// MiB instead of 50). Purged at once (0), every page freed and used again is faulted in anew,
/// 4 KiB at a time: 2.3× the faults, and 10–20 % more CPU-seconds (BENCHMARKS.md). The binary
/// only: the Python module runs inside the user's interpreter, whose allocator is not
/// tensorplay's to set.
fn purge_freed_memory_soon() {
    // SAFETY: sets one integer option of the allocator this binary links; mimalloc reads its
    // options atomically and allows changing them while it runs.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10) }
}
