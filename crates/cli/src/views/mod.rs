//! `tensorplay views`: every storage more than one tensor views, each tensor's byte range in
//! it, and the pairs of ranges that share bytes, with how they relate.

mod json;
mod text;

use crate::exit::ExitStatus;
use crate::inspect::OutputFormat;
use clap::Args;
use std::path::PathBuf;
use tensorplay_engine::{load, views};

#[derive(Debug, Args)]
pub struct ViewsArgs {
    /// Checkpoint file, sharded index or remote path.
    file: PathBuf,
    #[command(flatten)]
    remote: crate::remote::RemoteArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    format: OutputFormat,
}

pub fn run(args: &ViewsArgs) -> anyhow::Result<ExitStatus> {
    let file = args.remote.resolve(&args.file)?;
    let checkpoint = load::open(&file)?;
    // Every pair of views of a storage that share bytes is listed (all of them, when every
    // view is one alias): refuse before that takes more than a read may.
    views::check_budget(&checkpoint, &file, load::DEFAULT_MAX_MEMORY)?;
    let shared = views::shared_storages(&checkpoint);
    let rendered = match args.format {
        OutputFormat::Text => text::render(&checkpoint, &shared),
        OutputFormat::Json => json::render(&checkpoint, &shared),
    }?;
    crate::exit::print(&rendered)?;
    Ok(ExitStatus::Success)
}
