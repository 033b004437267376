//! The audit crate's one error type: problems with what the user configured.

use std::path::PathBuf;

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

    /// The config file is not valid TOML or has unknown keys or wrong types.
    #[error("{}: {detail}", .path.display())]
    ConfigSyntax {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        detail: String,
    },

    /// The config names a rule that does not exist.
    #[error("{}:{line}: unknown rule '{rule}' (see `tensorplay rules`)", .path.display())]
    UnknownRuleInConfig {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was written.
        rule: String,
    },

    /// A config value is out of range or malformed.
    #[error("{}:{line}: {detail}", .path.display())]
    ConfigValue {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        detail: String,
    },

    /// A glob in the config does not parse.
    #[error("{}:{line}: invalid glob '{glob}': {detail}", .path.display())]
    BadGlob {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The glob.
        glob: String,
        /// Why.
        detail: String,
    },

    /// A command-line selection names a rule that does not exist.
    #[error("unknown rule '{0}' (see `tensorplay rules`)")]
    UnknownRule(String),

    /// A baseline file is unreadable or malformed.
    #[error("{}: baseline: {detail}", .path.display())]
    Baseline {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

/// The audit crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
