//! The `tensorplay` binary: the command line of the `tensorplay` library crate.

fn main() -> std::process::ExitCode {
    no_huge_pages();
    std::process::ExitCode::from(tensorplay::run(std::env::args_os()))
}

/// Keeps the kernel from backing this process's heap with transparent huge pages. mimalloc's
/// arenas are 2 MiB-aligned, so where the kernel's policy is `always` each touched arena is
/// faulted in and zeroed 2 MiB at a time: a metadata audit of 20 000 tensors held 59 MiB
/// instead of 31, of 100 000 tensors 121 instead of 96, and a million safetensors entries
/// spent 0.4 s more in the kernel (BENCHMARKS.md). The binary's process only: the Python
/// module runs inside the user's interpreter, whose memory is not tensorplay's to set.
#[cfg(target_os = "linux")]
fn no_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes one integer and touches no memory of ours; a kernel
    // without it returns an error, which changes nothing.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

#[cfg(not(target_os = "linux"))]
fn no_huge_pages() {}
