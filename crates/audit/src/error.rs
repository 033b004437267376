//! The audit crate's one error type: problems with what the user configured.

use crate::snippet::{diagram, Problem};
use std::path::{Path, PathBuf};

/// A configuration, selection or baseline problem. Findings are not errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config file could not be read.
    #[error("{}: cannot read: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },

    /// The config file has problems: TOML syntax, unknown keys, wrong types, unknown rules,
    /// bad globs or values. Every one is listed, one per line.
    #[error("{}", config_lines(path, problems, text))]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, in line order.
        problems: Vec<Problem>,
        /// The file's text, for the diagrams under each problem.
        text: String,
    },

    /// A command-line selection names a rule that does not exist.
    #[error("{}", crate::suggest::unknown_rule(.0))]
    UnknownRule(String),

    /// A template baseline (`--template-baseline`) is unreadable or malformed.
    #[error("{}:{line}: template baseline: {detail}", .path.display())]
    TemplateBaseline {
        /// The file.
        path: PathBuf,
        /// The line at fault (0: the file as a whole).
        line: usize,
        /// What is wrong.
        detail: String,
    },

    /// A baseline file is unreadable or malformed.
    #[error("{}: baseline: {detail}", .path.display())]
    Baseline {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

/// Each problem as `path:line: detail`, then its source line with a caret under it.
fn config_lines(path: &Path, problems: &[Problem], text: &str) -> String {
    let mut lines = Vec::new();
    for p in problems {
        lines.push(format!("{}:{}: {}", path.display(), p.line, p.detail));
        lines.extend(diagram(text, p.spot()));
    }
    lines.join("\n")
}

/// The audit crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
