//! The report: plain data every renderer reads. The JSON renderer is its serialisation.

use crate::finding::Finding;
use crate::Severity;
use serde::{Deserialize, Serialize};

/// Version of the JSON report's shape; fields are only ever added within a version.
pub const SCHEMA_VERSION: u32 = 1;

/// Which findings fail the build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailOn {
    /// Errors fail (default).
    Error,
    /// Warnings and errors fail.
    Warning,
    /// Nothing fails; the report is informational.
    Never,
}

impl FailOn {
    /// Whether a finding of `severity` fails the build.
    pub fn fails(self, severity: Severity) -> bool {
        match self {
            FailOn::Error => severity >= Severity::Error,
            FailOn::Warning => severity >= Severity::Warning,
            FailOn::Never => false,
        }
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Which tool wrote it.
    pub tool: Tool,
    /// Totals.
    pub summary: Summary,
    /// One entry per checkpoint audited (read or not).
    pub files: Vec<FileReport>,
    /// Files found but not audited, with why.
    pub skipped: Vec<Skipped>,
}

/// Tool identity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    /// `tensorplay`.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// Totals over every file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Checkpoints audited.
    pub files: usize,
    /// Tensors in them.
    pub tensors: usize,
    /// Storages in them.
    pub storages: usize,
    /// Bytes their storages hold.
    pub bytes: u64,
    /// Findings by severity.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
    /// Infos.
    pub infos: usize,
    /// Whether no finding reaches the fail-on level.
    pub passed: bool,
}

/// One checkpoint's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileReport {
    /// The path as given or found.
    pub path: String,
    /// Its format, `null` when it could not be read.
    pub format: Option<String>,
    /// Tensor count.
    pub tensors: usize,
    /// Storage count.
    pub storages: usize,
    /// Bytes its storages hold.
    pub bytes: u64,
    /// Distinct storage locations, sorted.
    pub devices: Vec<String>,
    /// Distinct tensor dtypes, sorted.
    pub dtypes: Vec<String>,
    /// Codes of the rules that ran on it (JUnit reports one test case each).
    pub checked: Vec<String>,
    /// What they found.
    pub findings: Vec<Finding>,
}

/// A file seen but not audited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// The path.
    pub path: String,
    /// Why.
    pub reason: String,
}

impl Report {
    /// A report over `files`, with totals computed for `fail_on`.
    pub fn new(files: Vec<FileReport>, skipped: Vec<Skipped>, fail_on: FailOn) -> Report {
        let mut report = Report {
            schema_version: SCHEMA_VERSION,
            tool: Tool {
                name: "tensorplay".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            summary: Summary::default(),
            files,
            skipped,
        };
        report.recount(fail_on);
        report
    }

    /// Recomputes the totals (after a baseline removed findings, say).
    pub fn recount(&mut self, fail_on: FailOn) {
        let findings = || self.files.iter().flat_map(|f| &f.findings);
        let count = |s: Severity| findings().filter(|f| f.severity == s).count();
        self.summary = Summary {
            files: self.files.len(),
            tensors: self.files.iter().map(|f| f.tensors).sum(),
            storages: self.files.iter().map(|f| f.storages).sum(),
            bytes: self
                .files
                .iter()
                .fold(0u64, |acc, f| acc.saturating_add(f.bytes)),
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            infos: count(Severity::Info),
            passed: !findings().any(|f| fail_on.fails(f.severity)),
        };
    }
}
