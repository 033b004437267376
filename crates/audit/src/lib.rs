//! tensorplay's audit rules over a checkpoint model.
//!
//! Each rule is a type with a stable code, a name, a default severity and a doc text
//! ([`rule::Rule`]), listed once in [`registry::RULES`]. [`audit::audit`] runs the enabled
//! rules over a [`tensorplay_engine::Checkpoint`] into a [`report::FileReport`];
//! configuration ([`config::Config`]), selection and baselines are applied by the runner,
//! never inside a rule. Reports are plain data; rendering them is the CLI's business.
#![deny(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod audit;
pub mod baseline;
pub mod config;
pub mod error;
pub mod finding;
pub mod registry;
pub mod report;
pub mod rule;
pub mod rules;
pub mod severity;
#[cfg(test)]
mod testing;

pub use error::{Error, Result};
pub use finding::{Draft, Finding};
pub use severity::{Level, Severity};
