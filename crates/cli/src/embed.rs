//! The command without its output, for the Python extension (crates/python): `audit` and
//! `inspect` parsed from the same flags, their reports rendered by the same renderers,
//! nothing printed. The extension turns a [`Failure`] into a Python exception.

use crate::audit::{audit_paths, Settings};
use crate::{render, Cli, Command};
use clap::Parser as _;
use std::ffi::OsString;
use std::path::Path;
use tensorplay_engine::Checkpoint;

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

/// The subcommand `args` (after the program name) parse to, as the command parses them.
fn parse(args: &[OsString]) -> Result<Command, Failure> {
    let argv = std::iter::once(OsString::from("tensorplay")).chain(args.iter().cloned());
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

fn audit_args(args: &[OsString]) -> Result<Box<crate::audit::AuditArgs>, Failure> {
    match parse(args)? {
        Command::Audit(audit) => Ok(audit),
        _ => Err(Failure::Usage("expected the arguments of `audit`".into())),
    }
}

/// The settings of `audit` flags, with the layout facts the HTML report draws always made:
/// an embedded report may be written as HTML after the audit.
fn settings(args: &crate::audit::AuditArgs) -> Result<Settings, Failure> {
    let mut settings = Settings::from_args(args)?;
    settings.options.layout_facts = true;
    Ok(settings)
}

/// `tensorplay audit ARGS` (`args` from `audit` on): its report, judged by the baseline it
/// names, or why there is none. A file no rule can judge is an error, as it makes the
/// command exit 2.
pub fn audit(args: &[OsString]) -> Result<Report, Failure> {
    let args = audit_args(args)?;
    let settings = settings(&args)?;
    let (mut report, unreadable) = audit_paths(&args, &settings, false)?;
    if !unreadable.is_empty() {
        return Err(Failure::Error(unreadable));
    }
    if let Some(baseline) = &settings.baseline {
        baseline.suppress(&mut report);
    }
    Ok(report)
}

/// The audit of a checkpoint built in this process (a live model's tensors), shown as
/// `shown`, with the options of `audit ARGS`; the paths `args` name are not read.
pub fn audit_checkpoint(
    args: &[OsString],
    ckpt: &Checkpoint,
    shown: &str,
) -> Result<Report, Failure> {
    let args = audit_args(args)?;
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

/// `tensorplay audit ARGS` of one local file, whose checkpoint is kept for building its
/// tensors: deflated records are inflated whole (charged to `--max-memory`), as torch.load
/// holds them. The audit judges the very bytes the tensors are built from, so a file changed
/// after the audit changes nothing that was judged.
pub fn load(args: &[OsString]) -> Result<Loaded, Failure> {
    let args = audit_args(args)?;
    let settings = settings(&args)?;
    let [path] = args.paths.as_slice() else {
        return Err(Failure::Usage("expected one checkpoint path".into()));
    };
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
    let report = judged(&settings, &checkpoint, &shown);
    Ok(Loaded { report, checkpoint })
}

/// `tensorplay inspect ARGS` (`args` from `inspect` on): the text the command prints and the
/// JSON document of `--format json`, from one read.
pub fn inspect(args: &[OsString]) -> Result<(String, String), Failure> {
    let Command::Inspect(args) = parse(args)? else {
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

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

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

    /// The embedded audit is the command's: its flags, its findings, its renderers.
    #[test]
    fn audit_reports_what_the_command_does() {
        let report = audit(&args(&["audit", OVERLAPPING])).expect("a report");
        assert!(!report.summary.passed);
        assert_eq!(codes(&report), ["TP101", "TP102", "TP106"]);
        let only = audit(&args(&["audit", "--select", "TP106", OVERLAPPING])).expect("a report");
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
        let both = combine(&[&report, &only]);
        assert_eq!(both.summary.files, 2);
        assert!(!both.summary.passed);
    }

    #[test]
    fn failures_say_what_the_command_says() {
        let bad = audit(&args(&["audit", "--fail-on", "sometimes", OVERLAPPING]));
        assert!(
            matches!(&bad, Err(Failure::Usage(m)) if m.starts_with("invalid value 'sometimes'")),
            "{bad:?}"
        );
        let unknown = audit(&args(&["audit", "--select", "TP999", OVERLAPPING]));
        assert!(matches!(unknown, Err(Failure::Usage(m)) if m.contains("TP999")));
        let missing = audit(&args(&["audit", "/nonexistent/model.pt"]));
        assert!(matches!(missing, Err(Failure::Error(lines)) if lines.len() == 1));
        let wrong = inspect(&args(&["audit", OVERLAPPING]));
        assert!(matches!(wrong, Err(Failure::Usage(_))));
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
