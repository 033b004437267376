//! The `tensorplay` binary: the command line of the `tensorplay` library crate.

fn main() -> std::process::ExitCode {
    purge_freed_memory_at_once();
    std::process::ExitCode::from(tensorplay::run(std::env::args_os()))
}

/// mimalloc's `mi_option_purge_delay`, the sixteenth of v3's options (`mimalloc.h`); the
/// `-sys` crate's constants name only older ones.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Hands memory the reading freed back to the kernel at once rather than after mimalloc's
/// 10 ms delay (100 ms for its arenas). A read builds a stream's values, then the layers, then
/// frees the values: held over, the freed pages added up, and where the kernel backs the
/// heap with transparent huge pages a metadata audit of 100 000 torch.save tensors held 121
/// MiB instead of 97 (BENCHMARKS.md), at the same CPU time. The binary only: the Python
/// module runs inside the user's interpreter, whose allocator is not tensorplay's to set.
fn purge_freed_memory_at_once() {
    // SAFETY: sets one integer option of the allocator this binary links; mimalloc reads its
    // options atomically and allows changing them while it runs.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}
