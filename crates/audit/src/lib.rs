//! tensorplay's audit rules over a checkpoint model.
//!
//! Each rule is a type with a stable code, a name, a default severity and a doc text
//! ([`rule::Rule`]), listed once in [`registry::RULES`]; findings and reports carry
//! its [`Code`]. [`audit::audit`] runs the enabled rules over a
//! [`tensorplay_engine::Checkpoint`] into a [`report::FileReport`]; a rule sees only
//! [`settings::RuleSettings`]. Levels, ignores ([`config::Config`]), selection
//! ([`options::Options`]) and baselines are applied by the runner, never inside a rule. Reports are plain data; rendering them is the CLI's business.
#![deny(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod audit;
pub mod baseline;
pub mod code;
pub mod config;
pub mod diff;
pub mod error;
pub mod finding;
mod fingerprint;
pub mod inventory;
pub mod keras;
pub mod layout;
pub mod manifest;
pub mod options;
mod passes;
mod presets;
pub mod provenance;
pub mod registry;
pub mod report;
pub mod rule;
pub mod rules;
pub mod settings;
pub mod severity;
pub mod share;
pub mod snippet;
pub mod suggest;
pub mod template;
#[cfg(test)]
mod testing;
pub mod text;

pub use code::Code;
pub use error::{Error, Result};
pub use finding::{Draft, Finding};
pub use severity::{Level, Severity};
