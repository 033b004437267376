//! The report files a run writes, the same flags for `audit` and `merge`, each written whole
//! or not at all.

use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use tensorplay_audit::report::Report;

#[derive(Debug, Args)]
pub struct ReportFiles {
    /// Also write the JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a JUnit XML report to FILE (Jenkins, GitLab).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Write a SARIF 2.1.0 report to FILE (GitHub code scanning).
    #[arg(long, value_name = "FILE")]
    sarif: Option<PathBuf>,
    /// Write a GitLab Code Quality report to FILE.
    #[arg(long, value_name = "FILE")]
    gitlab_codequality: Option<PathBuf>,
    /// Write a self-contained HTML report to FILE: findings, storage sizes, segment maps
    /// (a merged report has no segment maps: JSON reports do not carry them).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Write a CycloneDX 1.6 bill of materials (JSON) to FILE: the model, its files with
    /// their SHA-256, the verdict.
    #[arg(long, value_name = "FILE")]
    cyclonedx: Option<PathBuf>,
}

impl ReportFiles {
    /// Whether a report that draws the layout (storage sizes, segment maps) is asked for.
    pub fn draws_layout(&self) -> bool {
        self.html.is_some()
    }

    /// Whether a bill of materials is asked for: each checkpoint's inventory is gathered.
    pub fn writes_bom(&self) -> bool {
        self.cyclonedx.is_some()
    }

    /// Renders and writes every report asked for.
    pub fn write(&self, report: &Report) -> anyhow::Result<()> {
        if let Some(path) = &self.json {
            write_file(path, &super::json::render(report)?)?;
        }
        if let Some(path) = &self.junit {
            write_file(path, &super::junit::render(report)?)?;
        }
        if let Some(path) = &self.sarif {
            write_file(path, &super::sarif::render(report)?)?;
        }
        if let Some(path) = &self.gitlab_codequality {
            write_file(path, &super::gitlab::render(report)?)?;
        }
        if let Some(path) = &self.html {
            write_file(path, &super::html::render(report)?)?;
        }
        if let Some(path) = &self.cyclonedx {
            write_file(path, &super::cyclonedx::render(report)?)?;
        }
        Ok(())
    }
}

/// Writes a report (or a baseline) whole or not at all: into a temporary file beside it, then renamed, so a
/// killed run never leaves a half-written report that CI would read. Missing folders are made.
pub fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    let fail = || format!("{}: cannot write", path.display());
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir).with_context(fail)?;
    let name = path.file_name().with_context(fail)?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp = dir.join(temp_name);
    let written = std::fs::write(&temp, text).and_then(|()| std::fs::rename(&temp, path));
    if written.is_err() {
        std::fs::remove_file(&temp).ok();
    }
    written.with_context(fail)
}
