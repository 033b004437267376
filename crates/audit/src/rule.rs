//! The rule trait and what a rule sees.

use crate::config::Config;
use crate::finding::Draft;
use crate::Severity;
use std::collections::HashMap;
use tensorplay_engine::alloc::simulate::LoadSimulation;
use tensorplay_engine::numeric::NonFinite;
use tensorplay_engine::views::SharedStorage;
use tensorplay_engine::Checkpoint;

/// One audit rule. Rules only report; severity overrides, selection, ignores and baselines
/// are applied by the runner.
pub trait Rule: Sync {
    /// Stable code, `TP101`.
    fn code(&self) -> &'static str;
    /// Stable kebab-case name, `view-overlap`.
    fn name(&self) -> &'static str;
    /// Severity unless configured otherwise.
    fn default_severity(&self) -> Severity;
    /// One line: what fires it.
    fn summary(&self) -> &'static str;
    /// What it checks, why it matters, an example, how to fix (printed by `explain`).
    fn doc(&self) -> &'static str;
    /// Whether the rule reads tensor bytes (skipped by `--metadata-only`).
    fn reads_bytes(&self) -> bool {
        false
    }
    /// Reports what it finds in one checkpoint.
    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Draft>);
}

/// A checkpoint with what several rules need computed once.
pub struct Context<'a> {
    /// The checkpoint.
    pub ckpt: &'a Checkpoint,
    /// Thresholds, allowed devices, allowlists.
    pub config: &'a Config,
    /// Storages viewed by more than one tensor.
    pub shared: Vec<SharedStorage<'a>>,
    /// Non-finite counts by tensor index, when the bytes were scanned.
    pub scans: Option<HashMap<usize, NonFinite>>,
    /// The simulated GPU load, when a memory rule runs.
    pub memory: Option<Memory>,
}

/// The checkpoint loaded through the simulated caching allocator.
pub struct Memory {
    /// On an unbounded device: what the load needs.
    pub full: LoadSimulation,
    /// The `--gpu-budget`, if any.
    pub budget: Option<u64>,
    /// On a device of exactly the budget.
    pub within_budget: Option<LoadSimulation>,
}

/// Declares a rule type: its identity, its doc, and the function that checks.
macro_rules! declare_rule {
    (
        $ty:ident {
            code: $code:literal,
            name: $name:literal,
            severity: $severity:ident,
            reads_bytes: $reads_bytes:literal,
            summary: $summary:literal,
            doc: $doc:expr,
            check: $check:path $(,)?
        }
    ) => {
        #[doc = $summary]
        pub struct $ty;

        impl $crate::rule::Rule for $ty {
            fn code(&self) -> &'static str {
                $code
            }
            fn name(&self) -> &'static str {
                $name
            }
            fn default_severity(&self) -> $crate::Severity {
                $crate::Severity::$severity
            }
            fn summary(&self) -> &'static str {
                $summary
            }
            fn doc(&self) -> &'static str {
                $doc
            }
            fn reads_bytes(&self) -> bool {
                $reads_bytes
            }
            fn check(
                &self,
                ctx: &$crate::rule::Context<'_>,
                out: &mut Vec<$crate::finding::Draft>,
            ) {
                $check(ctx, out)
            }
        }
    };
}
pub(crate) use declare_rule;
