//! The rule trait and what a rule sees.

use crate::finding::Draft;
use crate::manifest::Manifest;
use crate::options::Options;
use crate::settings::RuleSettings;
use crate::{Code, Severity};
use std::collections::HashMap;
use tensorplay_engine::alloc::device_load::DeviceLoad;
use tensorplay_engine::alloc::simulate::LoadSimulation;
use tensorplay_engine::numeric::NonFinite;
use tensorplay_engine::views::SharedStorage;
use tensorplay_engine::{Checkpoint, Error as ReadError};

/// One audit rule: its identity, its documentation and all of its logic. Severity
/// overrides, selection, ignores and baselines are applied by the runner, never by a rule.
pub trait Rule: Sync {
    /// Stable code with the rule's name, `TP101` / `view-overlap`.
    fn code(&self) -> Code;
    /// Stable kebab-case name, `view-overlap`.
    fn name(&self) -> &'static str {
        self.code().name()
    }
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
    /// What the rule is about (`security`, `views`, `memory`…), as code scanning filters
    /// alerts by. Code scanning rates the `security` ones from their severity: a rule has
    /// one severity, and every report says the same of it.
    fn tags(&self) -> &'static [&'static str];
    /// Whether the rule can judge a run with these options; one that cannot does not run,
    /// rather than report a pass it never judged.
    fn applies(&self, _options: &Options) -> bool {
        true
    }
    /// Whether configuration may change its level or ignore it. Rules that report
    /// unreadable checkpoints may not: such a checkpoint never passes.
    fn configurable(&self) -> bool {
        self.code().configurable()
    }
    /// Reports what it finds in one checkpoint that was read.
    fn check(&self, ctx: &Context<'_>, out: &mut Vec<Draft>);
    /// The findings for a checkpoint the readers refused, when the failure is of the kind
    /// this rule reports.
    fn read_failure(&self, _error: &ReadError) -> Vec<Draft> {
        Vec::new()
    }
    /// The least severity its findings on this checkpoint have, when what it found there is
    /// worse than its level says. The runner raises the configured severity to it, never
    /// lowers it; a rule configured `off` does not run.
    fn at_least(&self, _ctx: &Context<'_>) -> Option<Severity> {
        None
    }
    /// The most severity one of its findings may have, when the rule knows that finding to
    /// be benign (Lightning's placeholder score). The runner lowers the configured severity
    /// to it, never raises it.
    fn at_most(&self, _ctx: &Context<'_>, _draft: &Draft) -> Option<Severity> {
        None
    }
}

/// A checkpoint with what several rules need computed once.
pub struct Context<'a> {
    /// The checkpoint.
    pub ckpt: &'a Checkpoint,
    /// Thresholds, allowed devices, the tie allowlist.
    pub settings: &'a RuleSettings,
    /// Storages viewed by more than one tensor.
    pub shared: Vec<SharedStorage<'a>>,
    /// What every tensor is, found in one pass: the dtypes, and which of the rules that
    /// judge tensors one by one some tensor fires.
    pub tensor_facts: crate::passes::TensorFacts,
    /// What every storage holds and where, found in one pass.
    pub storage_facts: crate::passes::StorageFacts<'a>,
    /// Non-finite counts by tensor index, when the bytes were scanned.
    pub scans: Option<HashMap<usize, NonFinite>>,
    /// The simulated GPU load.
    pub memory: Memory,
    /// The real GPU load (`--load-to`), when one ran.
    pub device_load: Option<&'a DeviceLoad>,
    /// The layout the checkpoint must fit (`--expect`).
    pub expect: Option<&'a Manifest>,
    /// Its chat templates, each parsed and walked once.
    pub templates: Vec<crate::template::Judged>,
    /// The templates it may carry (`--template-baseline`).
    pub template_baseline: Option<&'a crate::template::TemplateBaseline>,
    /// Its Keras model's config, judged once (`.keras` archives).
    pub keras: Option<crate::keras::Judged>,
}

impl Context<'_> {
    /// What the audited tensors are, in messages: a file's, or a running process's objects
    /// (`load::live`), which no file holds.
    pub fn holder(&self) -> &'static str {
        match self.ckpt.format {
            tensorplay_engine::Format::Live => "the object",
            _ => "the file",
        }
    }
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

/// Declares a rule type: its identity, its doc, and the functions in its file that hold its
/// logic (`check`, and where the rule needs them `applies`, `read_failure`,
/// `at_least`, `at_most`).
macro_rules! declare_rule {
    (
        $ty:ident {
            code: $code:literal,
            name: $name:literal,
            severity: $severity:ident,
            reads_bytes: $reads_bytes:literal,
            tags: [$($tag:literal),+ $(,)?],
            summary: $summary:literal,
            doc: $doc:expr,
            check: $check:path
            $(, applies: $applies:path)?
            $(, read_failure: $read_failure:path)?
            $(, at_least: $at_least:path)?
            $(, at_most: $at_most:path)?
            $(,)?
        }
    ) => {
        #[doc = $summary]
        pub struct $ty;

        impl $ty {
            /// This rule's code and name.
            pub const CODE: $crate::Code = $crate::Code::declared($code, $name);
        }

        impl $crate::rule::Rule for $ty {
            fn code(&self) -> $crate::Code {
                Self::CODE
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
            fn tags(&self) -> &'static [&'static str] {
                &[$($tag),+]
            }
            $(
                fn applies(&self, options: &$crate::options::Options) -> bool {
                    $applies(options)
                }
            )?
            fn check(
                &self,
                ctx: &$crate::rule::Context<'_>,
                out: &mut Vec<$crate::finding::Draft>,
            ) {
                $check(ctx, out)
            }
            $(
                fn read_failure(
                    &self,
                    error: &tensorplay_engine::Error,
                ) -> Vec<$crate::finding::Draft> {
                    $read_failure(error).into_iter().collect()
                }
            )?
            $(
                fn at_least(&self, ctx: &$crate::rule::Context<'_>) -> Option<$crate::Severity> {
                    $at_least(ctx)
                }
            )?
            $(
                fn at_most(
                    &self,
                    ctx: &$crate::rule::Context<'_>,
                    draft: &$crate::finding::Draft,
                ) -> Option<$crate::Severity> {
                    $at_most(ctx, draft)
                }
            )?
        }
    };
}
pub(crate) use declare_rule;
