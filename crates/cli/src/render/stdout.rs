//! What `tensorplay audit` prints on stdout: the human report (the default, so a CI job's
//! log always ends with the verdict), the JSON report (`--ci-mode`, kept for scripts that
//! read it), GitHub annotations followed by the human report, or SARIF.

use super::{human, json, sarif};
use clap::ValueEnum;
use tensorplay_audit::report::Report;

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Findings per file, then the verdict line.
    Human,
    /// The JSON report.
    Json,
    /// GitHub workflow annotations, then the human report; a job summary when the runner
    /// asks for one.
    Github,
    /// SARIF 2.1.0, for code scanning uploads and SARIF viewers reading a pipe.
    Sarif,
}

impl Format {
    /// The format asked for; without one, `github` inside GitHub Actions, else `human`.
    pub fn choose(asked: Option<Format>, ci_mode: bool) -> Format {
        match asked {
            Some(format) => format,
            None if ci_mode => Format::Json,
            None if std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") => Format::Github,
            None => Format::Human,
        }
    }
}

pub fn render(report: &Report, format: Format, style: human::Style) -> anyhow::Result<String> {
    Ok(match format {
        Format::Human => human::render(report, style)?,
        Format::Json => json::render(report)?,
        // The annotations are commands, printed apart (`exit::print_commands`).
        Format::Github => human::render(report, style)?,
        Format::Sarif => sarif::render(report)?,
    })
}
