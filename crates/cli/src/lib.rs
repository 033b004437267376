//! The `tensorplay` command line: argument parsing, output and exit codes. The library
//! crates print nothing; everything a user sees is written here. A library as well as the
//! binary: the Python extension (crates/python) runs the same command through [`run`] and
//! reaches the audit and the report renderers through [`embed`].

mod allocator;
mod audit;
mod color;
mod convert;
mod diff;
mod discover;
mod duration;
pub mod embed;
mod exit;
mod expect;
mod inspect;
mod inventory;
mod merge;
mod partition;
mod peak;
mod progress;
mod remote;
mod render;
mod rules_bytes;
mod rules_cmd;
mod scheduler;
mod shared_set;
mod signature;
mod size;
mod table;
mod views;

use clap::{Parser, Subcommand};
use std::ffi::OsString;

#[global_allocator]
static ALLOCATOR: allocator::MiMalloc = allocator::MiMalloc;
use exit::ExitStatus;

/// Audits machine-learning checkpoints without executing them.
#[derive(Debug, Parser)]
#[command(name = "tensorplay", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Audit checkpoints and fail on violations: exit 0 passed, 1 findings, 2 could not judge.
    Audit(Box<audit::AuditArgs>),
    /// Combine the JSON reports of a partitioned audit (--partition K/N) into one verdict:
    /// exit 0 passed, 1 findings, 2 a part is missing, duplicated or foreign, or could not judge.
    Merge(merge::MergeArgs),
    /// Show the four layers of a checkpoint: tensors, their layouts, storages and data pointers.
    Inspect(inspect::InspectArgs),
    /// List storages that several tensors view, with each tensor's byte range and each pair of
    /// tensors that share bytes (a pair not listed is disjoint).
    Views(views::ViewsArgs),
    /// What changed between two checkpoints: tensors added, removed, renamed, reshaped,
    /// moved, ties made or broken, bytes; with --values, contents too.
    Diff(diff::DiffArgs),
    /// Rewrite a checkpoint as safetensors without executing it: views cloned, ties written
    /// once, devices mapped to CPU, every tensor verified before the file is put in place.
    Convert(convert::ConvertArgs),
    /// List every audit rule.
    Rules(rules_cmd::RulesArgs),
    /// Print what a rule checks, why it matters, an example and how to fix it.
    Explain {
        /// Rule code or name (TP101, view-overlap).
        rule: String,
    },
}

/// Runs the command line `args` (the program name first, as `std::env::args_os` gives it)
/// and returns the exit code: what the binary's `main` and the Python wheel's `tensorplay`
/// script both do. Usage errors, `--help` and `--version` print as clap prints them and return
/// its code instead of ending the process, so an embedding interpreter shuts down normally.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(err) => {
            // Printing fails only on a closed stream, where nothing more can be said.
            let _ = err.print();
            return u8::try_from(err.exit_code()).unwrap_or(ExitStatus::Error as u8);
        }
    };
    let result = match cli.command {
        Command::Audit(args) => audit::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Diff(args) => diff::run(&args),
        Command::Convert(args) => convert::run(&args),
        Command::Merge(args) => merge::run(&args),
        Command::Rules(args) => rules_cmd::list(&args),
        Command::Explain { rule } => rules_cmd::explain(&rule),
        Command::Views(args) => views::run(&args),
    };
    let status = match result {
        Ok(status) => status,
        Err(err) if exit::is_broken_pipe(&err) => ExitStatus::Success,
        Err(err) => {
            exit::eprint_error(&err);
            ExitStatus::Error
        }
    };
    // A binary's runtime flushes stdout on the way out; an interpreter embedding this does
    // not know Rust's buffer is there.
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    status as u8
}
