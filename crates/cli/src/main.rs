//! The `tensorplay` binary: the command line of the `tensorplay` library crate.

fn main() -> std::process::ExitCode {
    purge_freed_memory_soon();
    tensorplay_engine::set_hand_back(hand_back_freed_memory);
    std::process::ExitCode::from(tensorplay::run(std::env::args_os()))
}

/// mimalloc's `mi_option_purge_delay`, the sixteenth of v3's options (`mimalloc.h`); the
/// `-sys` crate's constants name only older ones.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Hands memory the reading freed back to the kernel 10 ms after it is freed, rather than
/// after v3's default second. A read builds a stream's values, then the layers, then frees
/// the values: held for a second, the freed pages added up (a metadata audit of 100 000
/// torch.save tensors held 121 MiB instead of 97). At once (0 ms), every page freed and used
/// again was faulted in anew: 10 ms takes 2–18 % less CPU on the per-tensor benchmarks for
/// 0–23 MiB more at their peaks (BENCHMARKS.md). The binary only: the Python module runs
/// inside the user's interpreter, whose allocator is not tensorplay's to set.
fn purge_freed_memory_soon() {
    // SAFETY: sets one integer option of the allocator this binary links; mimalloc reads its
    // options atomically and allows changing them while it runs.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 10) }
}

/// Hands every page freed so far back to the kernel now (`mi_collect(true)` purges what the
/// delay above holds): the engine asks after a reading that let go of much, before the next
/// reading of the file.
fn hand_back_freed_memory() {
    // SAFETY: a collection of this thread's heap and the arenas, which mimalloc allows at any
    // time.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
