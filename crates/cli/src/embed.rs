//! The command without its output, for the Python extension (crates/python): `audit` with
//! the typed options its flags fill ([`AuditOptions`]) and `inspect`, their reports rendered
//! by the same renderers, nothing printed. The extension turns a [`Failure`] into a Python
//! exception.

use crate::audit::{audit_paths, AuditArgs, Settings};
use crate::{render, Cli, Command};
use clap::Parser as _;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use tensorplay_engine::Checkpoint;

pub use crate::audit::{AuditOptions, OptionError, Scope};
pub use tensorplay_audit::report::Report;

/// Why an embedded run has no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The arguments are not the command's: clap's message, without its usage lines.
    Usage(String),
    /// What the command prints after `error: `, a line per problem.
    Error(Vec<String>),
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        // A rule the registry does not know is a bad argument, as a value clap refuses is.
        let usage = matches!(
            err.downcast_ref::<tensorplay_audit::error::Error>(),
            Some(tensorplay_audit::error::Error::UnknownRule(_))
        );
        let lines = crate::exit::error_lines(&err);
        match usage {
            true => Failure::Usage(lines.join("\n")),
            false => Failure::Error(lines),
        }
    }
}

/// The subcommand `args` (after the program name) parse to, as the command parses them: the
/// flags the caller does not set take the command's defaults.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, Failure> {
    let argv = std::iter::once(OsString::from("tensorplay")).chain(args);
    match Cli::try_parse_from(argv) {
        Ok(cli) => Ok(cli.command),
        Err(err) => {
            let text = err.render().to_string();
            // The first line says what is wrong; the usage and help hints are the command's.
            let first = text.lines().next().unwrap_or_default();
            Err(Failure::Usage(
                first.strip_prefix("error: ").unwrap_or(first).to_owned(),
            ))
        }
    }
}

/// `audit`'s arguments for `paths` with `options`, the other flags at their defaults; part
/// `partition` (`K/N`) of them when given.
fn audit_args(
    paths: &[PathBuf],
    options: &AuditOptions,
    partition: Option<&str>,
) -> Result<Box<AuditArgs>, Failure> {
    let mut argv = vec![OsString::from("audit")];
    if let Some(part) = partition {
        argv.extend([OsString::from("--partition"), OsString::from(part)]);
    }
    argv.push("--".into());
    argv.extend(paths.iter().map(|p| p.clone().into_os_string()));
    let Command::Audit(mut args) = parse(argv)? else {
        return Err(Failure::Usage("expected the arguments of `audit`".into()));
    };
    args.rules = options.rules.clone();
    args.file = options.file.clone();
    Ok(args)
}

/// The settings of `audit` flags, with the layout facts the HTML report draws always made:
/// an embedded report may be written as HTML after the audit.
fn settings(args: &AuditArgs) -> Result<Settings, Failure> {
    let mut settings = Settings::from_args(args)?;
    settings.options.layout_facts = true;
    Ok(settings)
}

/// `tensorplay audit PATHS` with `options` (part `partition`, `K/N`, of them when given): its
/// report, judged by the baseline it names, or why there is none. A file no rule can judge
/// is an error, as it makes the command exit 2.
pub fn audit(
    paths: &[PathBuf],
    options: &AuditOptions,
    partition: Option<&str>,
) -> Result<Report, Failure> {
    let args = audit_args(paths, options, partition)?;
    let settings = settings(&args)?;
    let (mut report, unreadable) = audit_paths(&args, &settings, false)?;
    if !unreadable.is_empty() {
        return Err(Failure::Error(unreadable));
    }
    if let Some(baseline) = &settings.baseline {
        baseline.suppress(&mut report);
    }
    crate::partition::seal(&mut report)?;
    Ok(report)
}

/// The audit of a checkpoint built in this process (a live model's tensors), shown as
/// `shown`, with the rule options of `options`.
pub fn audit_checkpoint(
    options: &AuditOptions,
    ckpt: &Checkpoint,
    shown: &str,
) -> Result<Report, Failure> {
    let args = audit_args(&[PathBuf::from(shown)], options, None)?;
    Ok(judged(&settings(&args)?, ckpt, shown))
}

/// The report of `ckpt` (shown as `shown`) under `settings`, judged by their baseline.
fn judged(settings: &Settings, ckpt: &Checkpoint, shown: &str) -> Report {
    let file =
        tensorplay_audit::audit::audit(ckpt, shown, &settings.config, &settings.options, None);
    let mut report = Report::new(vec![file], Vec::new(), settings.fail_on);
    if let Some(baseline) = &settings.baseline {
        baseline.suppress(&mut report);
    }
    report
}

/// What [`load`] read: the checkpoint with every storage's bytes in memory or mapped, and its
/// audit from that same reading.
pub struct Loaded {
    pub report: Report,
    pub checkpoint: Checkpoint,
}

/// `tensorplay audit PATH` of one local file with `options`, whose checkpoint is kept for
/// building its tensors: deflated records are inflated whole (charged to `--max-memory`), as
/// torch.load holds them. The audit judges the very bytes the tensors are built from, so a
/// file changed after the audit changes nothing that was judged.
pub fn load(path: &Path, options: &AuditOptions) -> Result<Loaded, Failure> {
    let args = audit_args(&[path.to_owned()], options, None)?;
    let settings = settings(&args)?;
    let shown = path.display().to_string();
    let limits = tensorplay_engine::load::ReadLimits {
        storage_bytes: true,
        hold_storages: true,
        ..settings.options.read_limits(false)
    };
    let fail = |e: tensorplay_engine::Error| Failure::Error(vec![e.to_string()]);
    let checkpoint = tensorplay_engine::load::probe(path)
        .and_then(|probe| tensorplay_engine::load::read_with(probe, limits))
        .map_err(fail)?;
    // Values a remote object could not fetch for the scan fail the load, with the reason.
    let report = tensorplay_engine::files::checked(path, judged(&settings, &checkpoint, &shown))
        .map_err(fail)?;
    Ok(Loaded { report, checkpoint })
}

/// `tensorplay inspect PATH` (only `tensor` when given): the text the command prints and the
/// JSON document of `--format json`, from one read.
pub fn inspect(path: &Path, tensor: Option<&str>) -> Result<(String, String), Failure> {
    let mut argv = vec![OsString::from("inspect")];
    if let Some(name) = tensor {
        argv.extend([OsString::from("--tensor"), OsString::from(name)]);
    }
    argv.extend([OsString::from("--"), path.as_os_str().to_owned()]);
    let Command::Inspect(args) = parse(argv)? else {
        return Err(Failure::Usage("expected the arguments of `inspect`".into()));
    };
    let checkpoint = crate::inspect::read(&args)?;
    let text = crate::inspect::render(&args, &checkpoint, crate::inspect::InspectFormat::Text)?;
    let json = crate::inspect::render(&args, &checkpoint, crate::inspect::InspectFormat::Json)?;
    Ok((text, json))
}

/// A report format, rendered as the command renders it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendering {
    /// The human report; `color` paints it.
    Human {
        color: bool,
        verbose: bool,
    },
    Json,
    Junit,
    Sarif,
    Html,
    GitlabCodequality,
}

/// `report` rendered as `rendering`.
pub fn render(report: &Report, rendering: Rendering) -> Result<String, Failure> {
    let text = match rendering {
        Rendering::Human { color, verbose } => {
            render::human::render(report, render::human::Style { color, verbose })?
        }
        Rendering::Json => render::json::render(report)?,
        Rendering::Junit => render::junit::render(report)?,
        Rendering::Sarif => render::sarif::render(report)?,
        Rendering::Html => render::html::render(report)?,
        Rendering::GitlabCodequality => render::gitlab::render(report)?,
    };
    Ok(text)
}

/// The JUnit report of `report` whose file `i`'s cases link `files[i]` where given
/// ([`render::junit::render_with_files`]): the pytest plugin's, test files linked.
pub fn render_junit(report: &Report, files: &[Option<String>]) -> Result<String, Failure> {
    Ok(render::junit::render_with_files(report, files)?)
}

/// Writes `text` to `path` whole or not at all, as the command writes its reports.
pub fn write(path: &Path, text: &str) -> Result<(), Failure> {
    Ok(render::files::write_file(path, text)?)
}

/// The rules `selectors` name (codes, code prefixes, names), each once in code order: the
/// resolver of `--select`/`--ignore`, so the package keeps no list of rules of its own.
pub fn select(selectors: &[String]) -> Result<Vec<tensorplay_audit::Code>, Failure> {
    tensorplay_audit::options::resolve(selectors).map_err(|e| Failure::Usage(e.to_string()))
}

/// Every rule's code, name and tags, in code order (`tensorplay rules`).
pub fn rules() -> Vec<(&'static str, &'static str, &'static [&'static str])> {
    tensorplay_audit::registry::RULES
        .iter()
        .map(|r| (r.code().as_str(), r.name(), r.tags()))
        .collect()
}

/// `tensorplay merge` of the parts' JSON reports `parts` (`part-1.json`, … name them in
/// messages): the merged report, refused as the command refuses a missing, duplicated,
/// foreign or edited part; a checkpoint no part judged is an error, as it makes merge exit 2.
pub fn merge(parts: &[String]) -> Result<Report, Failure> {
    let named: Vec<(String, String)> = parts
        .iter()
        .enumerate()
        .map(|(i, text)| (format!("part-{}.json", i + 1), text.clone()))
        .collect();
    let merged = crate::merge::merge_texts(&named)?;
    match merged.unjudged_lines() {
        lines if lines.is_empty() => Ok(merged.report),
        lines => Err(Failure::Error(lines)),
    }
}

/// One report of the files and skipped files of `reports`, in order, judged at the first
/// one's fail-on level (`error` when there is none): what a test session's audits make.
pub fn combine(reports: &[&Report]) -> Report {
    let fail_on = reports
        .first()
        .map(|r| r.summary.fail_on)
        .unwrap_or_default();
    let files = reports
        .iter()
        .flat_map(|r| r.files.iter().cloned())
        .collect();
    let skipped = reports
        .iter()
        .flat_map(|r| r.skipped.iter().cloned())
        .collect();
    Report::new(files, skipped, fail_on)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVERLAPPING: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/pytorch/overlapping_params.pt"
    );

    fn codes(report: &Report) -> Vec<&str> {
        let mut codes: Vec<&str> = report
            .files
            .iter()
            .flat_map(|f| &f.findings)
            .map(|f| f.code.as_str())
            .collect();
        codes.dedup();
        codes
    }

    fn options(entries: serde_json::Value) -> AuditOptions {
        let entries = entries.as_object().expect("a map").clone().into_iter();
        AuditOptions::from_entries(Scope::Files, entries.collect()).expect("valid options")
    }

    /// The embedded audit is the command's: its options, its findings, its renderers.
    #[test]
    fn audit_reports_what_the_command_does() {
        let paths = [PathBuf::from(OVERLAPPING)];
        let report = audit(&paths, &AuditOptions::default(), None).expect("a report");
        assert!(!report.summary.passed);
        assert_eq!(codes(&report), ["TP101", "TP102", "TP106"]);
        let only = options(serde_json::json!({"select": "TP106"}));
        let only = audit(&paths, &only, None).expect("a report");
        assert_eq!(codes(&only), ["TP106"]);
        let human = render(
            &report,
            Rendering::Human {
                color: false,
                verbose: false,
            },
        )
        .expect("rendered");
        assert!(human.contains("error[TP101] view-overlap"), "{human}");
        // A part is sealed as the command seals the part it writes, for merge to check.
        let part = audit(&paths, &AuditOptions::default(), Some("1/1")).expect("a report");
        let digest = &part.partition.as_ref().expect("a part").report_digest;
        assert_eq!(
            *digest,
            crate::partition::report_digest(&part, None).expect("digest")
        );
        assert!(digest.starts_with("sha256:"), "{digest}");
        let both = combine(&[&report, &only]);
        assert_eq!(both.summary.files, 2);
        assert!(!both.summary.passed);
    }

    #[test]
    fn failures_say_what_the_command_says() {
        let paths = [PathBuf::from(OVERLAPPING)];
        let unknown = options(serde_json::json!({"select": "TP999"}));
        let unknown = audit(&paths, &unknown, None);
        assert!(matches!(unknown, Err(Failure::Usage(m)) if m.contains("TP999")));
        let missing = [PathBuf::from("/nonexistent/model.pt")];
        let missing = audit(&missing, &AuditOptions::default(), None);
        assert!(matches!(missing, Err(Failure::Error(lines)) if lines.len() == 1));
        let part = audit(&paths, &AuditOptions::default(), Some("3/2"));
        assert!(matches!(part, Err(Failure::Usage(_))), "{part:?}");
        let tensor = inspect(Path::new(OVERLAPPING), Some("no.such.tensor"));
        assert!(matches!(tensor, Err(Failure::Error(_))), "{tensor:?}");
    }

    #[test]
    fn selections_resolve_as_the_command_resolves_them() {
        let codes = select(&["TP2".into(), "non-finite".into()]).expect("known");
        let codes: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
        assert_eq!(codes, ["TP201", "TP202", "TP203", "TP204", "TP401"]);
        assert_eq!(
            select(&["TP5".into(), "mixed-device".into()]),
            Err(Failure::Usage(
                "unknown rule 'mixed-device' (did you mean TP201 mixed-devices?)".into()
            ))
        );
    }

    /// `run` returns clap's codes instead of ending the process.
    #[test]
    fn run_returns_usage_codes() {
        assert_eq!(
            crate::run(["tensorplay", "audit", "--fail-on", "x", "f.pt"]),
            2
        );
        assert_eq!(crate::run(["tensorplay", "--version"]), 0);
    }
}
