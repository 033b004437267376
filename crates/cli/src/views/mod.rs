//! `tensorplay views`: every storage more than one tensor views, each tensor's byte range in
//! it, and how the ranges relate.

mod json;
mod text;

use crate::exit::ExitStatus;
use crate::inspect::OutputFormat;
use clap::Args;
use std::path::PathBuf;
use tensorplay_engine::{load, views};

#[derive(Debug, Args)]
pub struct ViewsArgs {
    /// Checkpoint file or sharded index.
    file: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    format: OutputFormat,
}

pub fn run(args: &ViewsArgs) -> anyhow::Result<ExitStatus> {
    let checkpoint = load::open(&args.file)?;
    // Every pair of views of a storage is related and listed: refuse before that takes more
    // than a read may.
    views::check_budget(&checkpoint, &args.file, load::DEFAULT_MAX_MEMORY)?;
    let shared = views::shared_storages(&checkpoint);
    let rendered = match args.format {
        OutputFormat::Text => text::render(&checkpoint, &shared)?,
        OutputFormat::Json => json::render(&checkpoint, &shared)?,
    };
    crate::exit::print(&rendered)?;
    Ok(ExitStatus::Success)
}
