//! `tensorplay diff OLD NEW`: what changed between two checkpoints, for a person, a script
//! or a pull-request comment.

mod markdown;
mod text;

use crate::exit::ExitStatus;
use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use tensorplay_audit::diff::{diff, DiffOptions};
use tensorplay_engine::{files, load};

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The checkpoint before (any format tensorplay reads, local or remote).
    old: PathBuf,
    /// The checkpoint after.
    new: PathBuf,
    #[command(flatten)]
    remote: crate::remote::RemoteArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    format: DiffFormat,
    /// Also compare values: a content hash per tensor, and the largest absolute difference
    /// for floats (reads every tensor's bytes).
    #[arg(long)]
    values: bool,
    /// Exit 1 when anything differs (default: exit 0 whenever both were read).
    #[arg(long)]
    fail_on_change: bool,
    /// Name OLD by LABEL in every format (e.g. `main:checkpoints/model.pt` for a copy taken
    /// from the base branch into a temporary file).
    #[arg(long, value_name = "LABEL")]
    old_label: Option<String>,
    /// Name NEW by LABEL in every format.
    #[arg(long, value_name = "LABEL")]
    new_label: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DiffFormat {
    /// Lines for people.
    Text,
    /// One JSON document.
    Json,
    /// A Markdown summary and table, for a pull-request comment.
    Markdown,
}

pub fn run(args: &DiffArgs) -> anyhow::Result<ExitStatus> {
    // Each side through the normal readers: refused files are errors, never "no tensors".
    let open = |path: &PathBuf, label: &Option<String>| match label {
        // The error names the file read; a label that differs says which side it stood for.
        Some(label) if Path::new(label) != path => {
            load::open(path).with_context(|| format!("{label}: cannot be read"))
        }
        _ => Ok(load::open(path)?),
    };
    let (old_path, new_path) = (
        args.remote.resolve(&args.old)?,
        args.remote.resolve(&args.new)?,
    );
    let old = open(&old_path, &args.old_label)?;
    let new = open(&new_path, &args.new_label)?;
    let options = DiffOptions {
        values: args.values,
    };
    // Values a remote side could not fetch fail the comparison, with the reason.
    let result = files::checked(&new_path, diff(&old, &new, options))?;
    let mut result = files::checked(&old_path, result)?;
    // A side read from a temporary copy is named as the reader knows it, not by that copy.
    if let Some(label) = &args.old_label {
        result.old.path.clone_from(label);
    }
    if let Some(label) = &args.new_label {
        result.new.path.clone_from(label);
    }
    let rendered = match args.format {
        DiffFormat::Text => text::render(&result)?,
        DiffFormat::Markdown => markdown::render(&result)?,
        DiffFormat::Json => {
            let mut out = serde_json::to_string_pretty(&result).context("diff as JSON")?;
            out.push('\n');
            out
        }
    };
    crate::exit::print(&rendered)?;
    Ok(if args.fail_on_change && !result.same {
        ExitStatus::Findings
    } else {
        ExitStatus::Success
    })
}

/// The counts a verdict line gives, in one order for every format.
fn counts(d: &tensorplay_audit::diff::Diff) -> Vec<String> {
    use tensorplay_audit::text::plural;
    let changed: std::collections::BTreeSet<&str> =
        d.changed.iter().map(|c| c.tensor.as_str()).collect();
    [
        (d.added.len(), "added"),
        (d.removed.len(), "removed"),
        (d.renamed.len(), "renamed"),
        (changed.len(), "changed"),
        (d.sharing.len(), "with ties made or broken"),
        (d.values.len(), "with new values"),
        (d.values_not_compared.len(), "with values not compared"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{} {what}", plural(n, "tensor")))
    .collect()
}

/// `+1.5 KiB`, `-3 B`, `±0 B`.
fn signed_bytes(delta: i128) -> String {
    let magnitude = tensorplay_audit::text::human_bytes(
        u64::try_from(delta.unsigned_abs()).unwrap_or(u64::MAX),
    );
    match delta.signum() {
        1 => format!("+{magnitude}"),
        -1 => format!("-{magnitude}"),
        _ => format!("±{magnitude}"),
    }
}

/// A tensor in a few words: `float32 [2, 3] cpu`.
fn describe(e: &tensorplay_audit::manifest::TensorEntry) -> String {
    format!(
        "{} {} {}",
        e.dtype,
        tensorplay_audit::diff::dims(&e.shape),
        e.device
    )
}

/// Another tensor's names as a list, or `none`.
fn names_or_none(names: &[String], show: impl Fn(&str) -> String) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.iter().map(|n| show(n)).collect::<Vec<_>>().join(", ")
    }
}
