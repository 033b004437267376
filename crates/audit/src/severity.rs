//! How serious a finding is.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A finding's severity; ordered `Info < Warning < Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; never fails a build by default.
    Info,
    /// Likely a problem.
    Warning,
    /// A problem: fails the build by default.
    Error,
}

impl Severity {
    /// Lower-case name used in reports and config.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A rule's level in configuration: a severity, or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The rule does not run.
    Off,
    /// Findings are infos.
    Info,
    /// Findings are warnings.
    Warning,
    /// Findings are errors.
    Error,
}

impl Level {
    /// The severity, unless off.
    pub fn severity(self) -> Option<Severity> {
        match self {
            Level::Off => None,
            Level::Info => Some(Severity::Info),
            Level::Warning => Some(Severity::Warning),
            Level::Error => Some(Severity::Error),
        }
    }
}
