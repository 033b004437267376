//! The `tensorplay` binary: the command line of the `tensorplay` library crate.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(tensorplay::run(std::env::args_os()))
}
