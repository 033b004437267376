//! `tensorplay merge`: the partial JSON reports of a partitioned audit (`--partition K/N`)
//! put back together into one report and one verdict, with the audit's exit rules.
//!
//! The parts must add up to exactly one run: every K of the same N (a byte-identical copy of
//! a part, from a retried job, counts once), the same input
//! digest, input lists that are disjoint and together give that digest back, the same
//! tensorplay version, fail-on level and skipped files. Anything else is an error (exit 2):
//! a merge that silently dropped a part would pass checkpoints nobody audited.

use crate::color::ColorArg;
use crate::exit::ExitStatus;
use crate::partition;
use crate::render;
use crate::shared_set;
use anyhow::Context as _;
use clap::Args;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tensorplay_audit::report::{FileReport, Partition, Report, SCHEMA_VERSION};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The parts' JSON reports (`tensorplay audit --partition K/N --json FILE`), one per part.
    #[arg(required = true, value_name = "REPORT")]
    reports: Vec<PathBuf>,
    /// What stdout shows [default: github inside GitHub Actions, else human].
    #[arg(long, value_enum)]
    format: Option<render::stdout::Format>,
    /// Colour the human log: auto (a terminal; NO_COLOR, FORCE_COLOR, CLICOLOR_FORCE honoured).
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorArg::Auto)]
    color: ColorArg,
    /// List every tensor of every finding in the human output (otherwise the first 10).
    #[arg(long)]
    verbose: bool,
    #[command(flatten)]
    files: render::files::ReportFiles,
}

/// A part read back, with where it came from.
struct Part {
    source: String,
    report: Report,
    partition: Partition,
}

pub fn run(args: &MergeArgs) -> anyhow::Result<ExitStatus> {
    let parts = args
        .reports
        .iter()
        .map(|path| read_part(path))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let merged = merge(parts)?;
    let report = &merged.report;

    args.files.write(report)?;
    let format = render::stdout::Format::choose(args.format, false);
    if format == render::stdout::Format::Github {
        render::github::append_step_summary(report);
        crate::exit::print_commands(&render::github::annotations(report))?;
    }
    let style = render::human::Style {
        color: crate::color::enabled(args.color, false),
        verbose: args.verbose,
    };
    crate::exit::print(&render::stdout::render(report, format, style)?)?;

    if !merged.unjudged.is_empty() {
        // As in the audit: a checkpoint that was not judged leaves the run without a verdict.
        for line in merged.unjudged_lines() {
            eprintln!("error: {line}");
        }
        return Ok(ExitStatus::Error);
    }
    Ok(if report.summary.passed {
        ExitStatus::Success
    } else {
        ExitStatus::Findings
    })
}

fn read_part(path: &Path) -> anyhow::Result<Part> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("{source}: cannot read"))?;
    part(source, &text)
}

/// The part whose JSON report is `text`, read from `source`, its digest checked.
fn part(source: String, text: &str) -> anyhow::Result<Part> {
    let value: serde_json::Value = serde_json::from_str(text)
        .with_context(|| format!("{source}: not a tensorplay JSON report"))?;
    let version = value.get("schema_version").and_then(|v| v.as_u64());
    if version != Some(u64::from(SCHEMA_VERSION)) {
        anyhow::bail!(
            "{source}: not a tensorplay JSON report of schema_version {SCHEMA_VERSION} (found {})",
            version.map_or("none".to_owned(), |v| v.to_string())
        );
    }
    let mut report: Report = serde_json::from_value(value)
        .with_context(|| format!("{source}: not a tensorplay JSON report"))?;
    let Some(stored) = report.partition.as_ref().map(|p| p.report_digest.clone()) else {
        anyhow::bail!("{source}: not a partial report (written without --partition K/N)");
    };
    check_digest(&source, &report, &stored)?;
    let Some(partition) = report.partition.take() else {
        anyhow::bail!("{source}: not a partial report (written without --partition K/N)");
    };
    Ok(Part {
        source,
        report,
        partition,
    })
}

/// A part is merged only as its audit wrote it: its findings, verdict and inputs hash to the
/// digest it carries, keyed with `TENSORPLAY_MERGE_KEY` exactly when the audit was.
fn check_digest(source: &str, report: &Report, stored: &str) -> anyhow::Result<()> {
    let key = partition::merge_key();
    if stored.starts_with("hmac-") && key.is_none() {
        anyhow::bail!(
            "{source}: sealed with a key: set {} to the audit's key to merge it",
            partition::MERGE_KEY
        );
    }
    if stored.starts_with("sha256:") && key.is_some() {
        anyhow::bail!(
            "{source}: written without {}: with the key set, only parts sealed with it merge",
            partition::MERGE_KEY
        );
    }
    if partition::report_digest(report, key.as_deref())? != stored {
        anyhow::bail!(
            "{source}: the part was altered after its audit (its report_digest does not match its content{})",
            if key.is_some() { ", or the key differs" } else { "" }
        );
    }
    Ok(())
}

/// The merged report, and the inputs no part judged (with the part that had them).
#[derive(Debug)]
pub struct Merged {
    pub report: Report,
    pub unjudged: Vec<(String, String)>,
}

/// The merge of parts given as `(source, JSON text)`: what `run` merges from files.
pub fn merge_texts(parts: &[(String, String)]) -> anyhow::Result<Merged> {
    let parts = parts
        .iter()
        .map(|(source, text)| part(source.clone(), text))
        .collect::<anyhow::Result<Vec<_>>>()?;
    merge(parts)
}

impl Merged {
    /// What leaves the merged run without a verdict, a line per checkpoint no part judged.
    pub fn unjudged_lines(&self) -> Vec<String> {
        self.unjudged
            .iter()
            .map(|(source, path)| {
                format!("{path}: not in the report of its part ({source}): that part could not judge it")
            })
            .collect()
    }
}

fn merge(mut parts: Vec<Part>) -> anyhow::Result<Merged> {
    parts.sort_by_key(|p| p.partition.k);
    // A retried job (Kubernetes and AWS Batch rerun a failed index) writes the same part
    // byte for byte: a copy adds nothing and is dropped. Two different parts for one index
    // are two audits of it, and the merge cannot choose.
    let mut kept: Vec<Part> = Vec::with_capacity(parts.len());
    for part in parts {
        match kept.last() {
            Some(last)
                if last.partition.k == part.partition.k && last.partition.n == part.partition.n =>
            {
                if last.partition.report_digest != part.partition.report_digest {
                    anyhow::bail!(
                        "part {}/{} given twice with different content: {} and {} (a retry of a job must audit the same inputs with the same options; keep one)",
                        part.partition.k,
                        part.partition.n,
                        last.source,
                        part.source
                    );
                }
            }
            _ => kept.push(part),
        }
    }
    let parts = kept;
    let first = &parts[0];
    let n = first.partition.n;
    let ours = env!("CARGO_PKG_VERSION");
    let mut by_k: BTreeMap<usize, &str> = BTreeMap::new();
    for part in &parts {
        let (p, source) = (&part.partition, &part.source);
        if p.n != n || p.k == 0 || p.k > n {
            anyhow::bail!(
                "{source} is part {}/{}, {} is part {}/{n}: parts of different runs",
                p.k,
                p.n,
                first.source,
                first.partition.k
            );
        }
        if p.source != first.partition.source {
            let shown = |s: &Option<String>| s.clone().unwrap_or_else(|| "an explicit K/N".into());
            anyhow::bail!(
                "{source} took its share from {}, {} from {}: parts of different runs (give every job the same --partition source)",
                shown(&p.source),
                first.source,
                shown(&first.partition.source)
            );
        }
        if p.inputs_digest != first.partition.inputs_digest {
            anyhow::bail!(
                "{source} and {} are parts of different runs (their input lists differ)",
                first.source
            );
        }
        if let Some(other) = by_k.insert(p.k, source) {
            anyhow::bail!("part {}/{n} given twice: {other} and {source}", p.k);
        }
        if part.report.tool.version != ours {
            anyhow::bail!(
                "{source} was written by tensorplay {}; merge with the same version (this is {ours})",
                part.report.tool.version
            );
        }
        if part.report.summary.fail_on != first.report.summary.fail_on {
            anyhow::bail!(
                "{source} and {} were judged with different --fail-on levels",
                first.source
            );
        }
        if part.report.skipped != first.report.skipped {
            anyhow::bail!(
                "{source} and {} skipped different files: parts of different runs",
                first.source
            );
        }
    }
    let missing: Vec<String> = (1..=n)
        .filter(|k| !by_k.contains_key(k))
        .map(|k| k.to_string())
        .collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "missing part{} {} of {n} (given {} report{})",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            parts.len(),
            if parts.len() == 1 { "" } else { "s" }
        );
    }
    // The parts' lists must be disjoint and add up to the list every part was cut from.
    let mut seen: BTreeMap<(&str, Option<&str>), &str> = BTreeMap::new();
    for part in &parts {
        for input in &part.partition.inputs {
            let key = (input.path.as_str(), input.shard.as_deref());
            if let Some(other) = seen.insert(key, &part.source) {
                anyhow::bail!(
                    "{}{} is in two parts, {other} and {}: the parts do not add up to one run",
                    input.path,
                    input
                        .shard
                        .as_deref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default(),
                    part.source
                );
            }
        }
    }
    let all: Vec<_> = parts
        .iter()
        .flat_map(|p| p.partition.inputs.iter().cloned())
        .collect();
    if partition::digest(&all, first.partition.source.as_deref()) != first.partition.inputs_digest {
        anyhow::bail!("the parts' input lists do not add up to their run's (a part was altered)");
    }

    let fail_on = first.report.summary.fail_on;
    let skipped = first.report.skipped.clone();
    let mut files: BTreeMap<String, Vec<(String, FileReport)>> = BTreeMap::new();
    let mut order: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut unjudged = Vec::new();
    for part in parts {
        let given: BTreeSet<&str> = part
            .partition
            .inputs
            .iter()
            .map(|i| i.path.as_str())
            .collect();
        let mut judged = BTreeSet::new();
        for file in &part.report.files {
            if !given.contains(file.path.as_str()) || !judged.insert(file.path.clone()) {
                anyhow::bail!(
                    "{}: {} is not among the part's inputs (a part was altered)",
                    part.source,
                    file.path
                );
            }
        }
        for path in &given {
            if !judged.contains(*path) {
                unjudged.push((part.source.clone(), (*path).to_owned()));
            }
        }
        for set in &part.partition.shared_sets {
            order
                .entry(set.path.clone())
                .or_default()
                .extend(set.tensor_order.iter().map(|(k, v)| (k.clone(), *v)));
        }
        for file in part.report.files {
            files
                .entry(file.path.clone())
                .or_default()
                .push((part.source.clone(), file));
        }
    }
    // A sharded set divided by shard is in the report of every part that had a share of it.
    let no_order = BTreeMap::new();
    let mut files = files
        .into_iter()
        .map(|(path, group)| match group.len() {
            1 => Ok(group.into_iter().map(|(_, file)| file).next().expect("one")),
            _ => shared_set::combine(group, order.get(&path).unwrap_or(&no_order)),
        })
        .collect::<anyhow::Result<Vec<FileReport>>>()?;
    // The order an unpartitioned audit reports in: discovery's, by path.
    files.sort_by(|a, b| Path::new(&a.path).cmp(Path::new(&b.path)));
    Ok(Merged {
        report: Report::new(files, skipped, fail_on),
        unjudged,
    })
}
