//! `tensorplay inspect`: the four-layer snapshot of a checkpoint.

mod alloc;
mod json;
mod text;

use crate::exit::ExitStatus;
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::sync::Arc;
use tensorplay_audit::manifest::Manifest;
use tensorplay_engine::{files, load, Checkpoint, CompositeTensor, Storage, Tensor};

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Checkpoint file, sharded index or remote path (the format is read from the content).
    file: PathBuf,
    #[command(flatten)]
    remote: crate::remote::RemoteArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = InspectFormat::Text)]
    format: InspectFormat,
    /// Show only this tensor and its storage.
    #[arg(long, value_name = "NAME")]
    tensor: Option<String>,
    /// Also show the simulated GPU segment map of loading the checkpoint in file order.
    #[arg(long)]
    alloc: bool,
    /// Show where each storage's bytes are in this process's memory (different on every run;
    /// the text is otherwise the same run after run).
    #[arg(long)]
    addresses: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OutputFormat {
    /// Tables for people.
    Text,
    /// One JSON document, stable across releases.
    Json,
}

/// What `inspect` prints: the shared formats, or the layout.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InspectFormat {
    /// Tables for people.
    Text,
    /// One JSON document, stable across releases.
    Json,
    /// Names, dtypes, shapes, strides and devices as JSON: what `audit --expect` checks
    /// other checkpoints against.
    Layout,
}

/// What one inspect run shows: all of a checkpoint, or one tensor and its storage.
pub struct Snapshot<'a> {
    pub checkpoint: &'a Checkpoint,
    pub tensors: Vec<&'a Tensor>,
    pub storages: Vec<&'a Arc<Storage>>,
    /// Sparse, nested and wrapper tensors shown, their components among `tensors`.
    pub composites: Vec<&'a CompositeTensor>,
}

impl<'a> Snapshot<'a> {
    fn new(checkpoint: &'a Checkpoint, only: Option<&str>) -> anyhow::Result<Self> {
        let composite = only.and_then(|name| checkpoint.composites.iter().find(|c| c.name == name));
        let composites: Vec<&CompositeTensor> = match (only, composite) {
            (None, _) => checkpoint.composites.iter().collect(),
            (Some(_), Some(c)) => vec![c],
            (Some(_), None) => Vec::new(),
        };
        let tensors: Vec<&Tensor> = match (only, composite) {
            (None, _) => checkpoint.tensors.iter().collect(),
            // A composite shows with its strided components.
            (Some(_), Some(c)) => c
                .components
                .iter()
                .filter_map(|p| checkpoint.tensor(&p.tensor))
                .collect(),
            (Some(name), None) => match checkpoint.tensor(name) {
                Some(t) => vec![t],
                None => bail!(
                    "{}: no tensor named '{name}' (the checkpoint holds {} tensors)",
                    checkpoint.path.display(),
                    checkpoint.tensors.len()
                ),
            },
        };
        let storages = match only {
            None => checkpoint.storages.iter().collect(),
            Some(_) => {
                let mut shown: Vec<&Arc<Storage>> =
                    tensors.iter().map(|t| t.tensor_impl().storage()).collect();
                shown.sort_by_key(|s| s.id().index());
                shown.dedup_by_key(|s| s.id().index());
                shown
            }
        };
        Ok(Snapshot {
            checkpoint,
            tensors,
            storages,
            composites,
        })
    }
}

pub fn run(args: &InspectArgs) -> anyhow::Result<ExitStatus> {
    let file = args.remote.resolve(&args.file)?;
    let rendered = render(args, &read_path(&file)?, args.format);
    let rendered = files::checked(&file, rendered)??;
    crate::exit::print(&rendered)?;
    Ok(ExitStatus::Success)
}

/// The checkpoint `args` name, refused when a tensor's data pointer disagrees with its storage.
pub fn read(args: &InspectArgs) -> anyhow::Result<Checkpoint> {
    read_path(&args.file)
}

fn read_path(file: &std::path::Path) -> anyhow::Result<Checkpoint> {
    let checkpoint = load::open(file)?;
    for tensor in &checkpoint.tensors {
        tensor
            .tensor_impl()
            .verify_data_ptr_consistency(tensor.name())
            .with_context(|| checkpoint.path.display().to_string())?;
    }
    Ok(checkpoint)
}

/// What `inspect` shows of `checkpoint` in `format`, with the rest of `args`.
pub fn render(
    args: &InspectArgs,
    checkpoint: &Checkpoint,
    format: InspectFormat,
) -> anyhow::Result<String> {
    let snapshot = Snapshot::new(checkpoint, args.tensor.as_deref())?;
    let sim = args.alloc.then(|| alloc::simulate(checkpoint));
    Ok(match format {
        InspectFormat::Text => {
            let mut out = text::render(&snapshot, args.addresses)?;
            if let Some(sim) = &sim {
                alloc::text(sim, &mut out)?;
            }
            out
        }
        InspectFormat::Json => json::render(&snapshot, sim.as_ref().map(alloc::json))?,
        InspectFormat::Layout => {
            let mut layout = Manifest::of(checkpoint);
            if let Some(only) = &args.tensor {
                layout.tensors.retain(|t| &t.name == only);
            }
            let mut out = serde_json::to_string_pretty(&layout)?;
            out.push('\n');
            out
        }
    })
}
