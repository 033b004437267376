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
    /// Memory reading the file and listing its views may take [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size)]
    max_memory: Option<u64>,
}

pub fn run(args: &ViewsArgs) -> anyhow::Result<ExitStatus> {
    let file = args.remote.resolve(&args.file)?;
    let max_memory = args.max_memory.unwrap_or(load::DEFAULT_MAX_MEMORY);
    let limits = load::ReadLimits {
        max_memory,
        ..load::ReadLimits::default()
    };
    let checkpoint = load::read_with(load::probe(&file)?, limits)?;
    // Every pair of views of a storage that share bytes is listed with both names (all of
    // them, when every view is one alias): refuse before that takes more than a read may.
    views::check_listing_budget(&checkpoint, &file, max_memory)?;
    let shared = views::shared_storages(&checkpoint);
    let rendered = match args.format {
        OutputFormat::Text => text::render(&checkpoint, &shared),
        OutputFormat::Json => json::render(&checkpoint, &shared),
    }?;
    crate::exit::print(&rendered)?;
    Ok(ExitStatus::Success)
}
