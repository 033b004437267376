//! tensorplay's audit rules over a checkpoint model.
//!
//! The rule registry, the rules and the report data model land here; until then the crate
//! only fixes where they go and what they read: [`tensorplay_engine::Checkpoint`].
#![deny(missing_docs)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub use tensorplay_engine as engine;
