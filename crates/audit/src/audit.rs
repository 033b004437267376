//! The runner: which rules apply to a checkpoint, with what severity, and what they find.
//! It names no rule: each rule says when it applies and what it reports.

use crate::config::Config;
use crate::finding::{Draft, Finding, GlobalRef};
use crate::inventory::Inventory;
use crate::layout::layout;
use crate::options::Options;
use crate::passes::{StorageFacts, TensorFacts};
use crate::registry::RULES;
use crate::report::{DeviceFacts, FileReport, MemoryFacts};
use crate::rule::{Context, Memory, Rule};
use crate::text::{bounded_message, bounded_name};
use crate::Severity;
use rayon::prelude::*;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::Path;
use tensorplay_engine::alloc::device_load::DeviceLoad;
use tensorplay_engine::alloc::simulate::simulate_load;
use tensorplay_engine::load::DEFAULT_MAX_MEMORY;
use tensorplay_engine::{numeric, views, Checkpoint, Error as ReadError};

/// The rules that run on the checkpoint at `path`, each with its final severity.
pub fn enabled(
    config: &Config,
    options: &Options,
    path: &str,
) -> Vec<(&'static dyn Rule, Severity)> {
    RULES
        .iter()
        .copied()
        .filter(|r| options.selects(r.code()))
        .filter(|r| !(options.metadata_only && r.reads_bytes()))
        .filter(|r| r.applies(options))
        .filter(|r| !config.ignored(path, r.code()))
        .filter_map(|r| match config.level(r.code()) {
            None => Some((r, r.default_severity())),
            Some(level) => level.severity().map(|s| (r, s)),
        })
        .collect()
}

/// Refuses a checkpoint whose view analysis would not fit what the read left of the budget
/// (the view analysis gets the rest of the budget, not the budget again). The refusal is
/// stated against the whole budget, as the flag sets it: the analysis and what the read
/// holds, against `--max-memory`.
pub fn views_within_budget(
    ckpt: &Checkpoint,
    path: &str,
    options: &Options,
) -> Result<(), tensorplay_engine::Error> {
    let budget = options.max_memory.unwrap_or(DEFAULT_MAX_MEMORY);
    let left = budget.saturating_sub(ckpt.held_bytes);
    views::check_budget(ckpt, Path::new(path), left).map_err(|refused| match refused {
        ReadError::MemoryBudget {
            path,
            needed,
            limit,
            what,
        } if limit == left => ReadError::MemoryBudget {
            path,
            needed: needed.saturating_add(ckpt.held_bytes),
            limit: budget,
            what,
        },
        refused => refused,
    })
}

/// Audits one checkpoint that was read; `device_load` is its real GPU load, when one ran.
pub fn audit(
    ckpt: &Checkpoint,
    path: &str,
    config: &Config,
    options: &Options,
    device_load: Option<&DeviceLoad>,
) -> FileReport {
    if let Err(refused) = views_within_budget(ckpt, path, options) {
        // The memory-budget refusal is always claimed (TP506): the file fails unjudged, and
        // names the globals its reading met (what another loader of it would run).
        let refused = refused.with_unsafe_globals(ckpt.unsafe_globals.clone());
        if let Some(report) = read_failure(path, &refused) {
            return report;
        }
    }
    let rules = enabled(config, options, path);
    let reads_bytes = rules.iter().any(|(r, _)| r.reads_bytes());
    // The byte scan, the simulated load, the view analysis and the passes over the storages
    // and the tensors are independent.
    let (scans, (memory, (shared, (storage_facts, tensor_facts)))) = rayon::join(
        || {
            reads_bytes.then(|| {
                let progress = options.progress.as_deref();
                match options.scan_share.as_deref() {
                    Some(share) => {
                        numeric::scan_checkpoint_where(ckpt, progress, &|s| share.scans(s))
                    }
                    None => numeric::scan_checkpoint(ckpt, progress),
                }
            })
        },
        || {
            rayon::join(
                || simulate(ckpt, config, options),
                || {
                    rayon::join(
                        || views::shared_storages(ckpt),
                        || rayon::join(|| StorageFacts::of(ckpt), || TensorFacts::of(ckpt)),
                    )
                },
            )
        },
    );
    let ctx = Context {
        ckpt,
        settings: &config.settings,
        shared,
        storage_facts,
        tensor_facts,
        scans,
        memory,
        device_load,
        expect: options.expect.as_deref(),
        templates: ckpt
            .chat_templates
            .iter()
            .map(|t| crate::template::judge(path, t))
            .collect(),
        template_baseline: options.template_baseline.as_deref(),
        keras: ckpt.keras.as_ref().map(crate::keras::judge),
    };
    // Rules read the context and nothing else: they run side by side, findings kept in
    // rule order.
    let findings: Vec<Finding> = rules
        .par_iter()
        .map(|(rule, severity)| {
            let mut drafts = Vec::new();
            rule.check(&ctx, &mut drafts);
            let severity = rule.at_least(&ctx).map_or(*severity, |s| s.max(*severity));
            drafts
                .into_iter()
                .map(|d| {
                    let severity = rule.at_most(&ctx, &d).map_or(severity, |s| s.min(severity));
                    finding(*rule, severity, d)
                })
                .collect::<Vec<_>>()
        })
        .flatten()
        .collect();
    FileReport {
        path: path.to_owned(),
        format: Some(ckpt.format.name().to_owned()),
        tensors: ckpt.tensors.len(),
        storages: ckpt.storages.len(),
        bytes: ctx.storage_facts.bytes,
        devices: ctx
            .storage_facts
            .locations
            .iter()
            .map(|&l| l.to_owned())
            .collect(),
        dtypes: ctx
            .tensor_facts
            .dtypes
            .iter()
            .map(|&d| d.to_owned())
            .collect(),
        checked: rules.iter().map(|(r, _)| r.code()).collect(),
        findings,
        suppressed: Vec::new(),
        allowed_globals: crate::rules::safety::allowed_seen(ckpt, &config.settings),
        memory: Some(memory_facts(&ctx.memory)),
        device: device_load.map(device_facts),
        remote: None,
        inventory: options
            .inventory
            .then(|| Inventory::of(ckpt, &ctx.templates)),
        layout: options.layout_facts.then(|| {
            layout(
                ckpt,
                &ctx.memory.full,
                config.settings.thresholds.fragmentation_score,
            )
        }),
    }
}

fn device_facts(load: &DeviceLoad) -> DeviceFacts {
    let stats = &load.stats;
    DeviceFacts {
        device: format!("cuda:{}", load.ordinal),
        reserved_bytes: stats.reserved_bytes.current,
        allocated_bytes: stats.allocated_bytes.current,
        segments: stats.segment.current,
        storages_checked: load.storages.len(),
        storages_failed: load.storages.iter().filter(|c| !c.ok()).count(),
        pinned_staging: load.pinned_available,
    }
}

/// The load on an unbounded device, and on one of the budget's size when there is one.
fn simulate(ckpt: &Checkpoint, config: &Config, options: &Options) -> Memory {
    let budget = options.gpu_budget;
    Memory {
        full: simulate_load(ckpt, &config.allocator, u64::MAX, options.layout_facts),
        budget,
        within_budget: budget.map(|b| simulate_load(ckpt, &config.allocator, b, false)),
    }
}

fn memory_facts(memory: &Memory) -> MemoryFacts {
    let stats = &memory.full.stats;
    MemoryFacts {
        requested_bytes: stats.requested_bytes.current,
        allocated_bytes: stats.allocated_bytes.current,
        reserved_bytes: stats.reserved_bytes.current,
        segments: stats.segment.current,
        fragmentation: memory.full.fragmentation(),
        budget_bytes: memory.budget,
        fits_budget: memory.within_budget.as_ref().map(|w| w.oom.is_none()),
    }
}

/// The report of a checkpoint the readers refused, from the rule that reports that kind of
/// failure, always at its default severity: configuration cannot change those rules, so an
/// unreadable checkpoint never passes. `None` when no rule claims the failure (a path that
/// cannot be opened is a usage problem, not a finding).
pub fn read_failure(path: &str, error: &ReadError) -> Option<FileReport> {
    read_failure_with(path, error, &Config::default())
}

/// [`read_failure`] under `config`: a global the refused file's reading met that `[pickle]
/// allow_globals` or `allow_presets` accepts is no TP501, as in a file that was read (listed
/// among the report's allowed globals), while the refusal itself still fails the file. When
/// the only findings are such globals, they all stay: an unreadable file never passes.
pub fn read_failure_with(path: &str, error: &ReadError, config: &Config) -> Option<FileReport> {
    let mut checked = Vec::new();
    let mut findings = Vec::new();
    for rule in RULES {
        let drafts = rule.read_failure(error);
        if !drafts.is_empty() {
            checked.push(rule.code());
        }
        findings.extend(
            drafts
                .into_iter()
                .map(|d| finding(*rule, rule.default_severity(), d)),
        );
    }
    if findings.is_empty() {
        return None;
    }
    let accepted = |f: &Finding| {
        f.global
            .as_ref()
            .is_some_and(|g| config.settings.global_allowed(&g.module, &g.name))
    };
    let mut allowed_globals = Vec::new();
    if findings.iter().any(|f| !accepted(f)) {
        let (allowed, kept): (Vec<Finding>, Vec<Finding>) =
            findings.into_iter().partition(|f| accepted(f));
        findings = kept;
        let names: BTreeSet<String> = allowed
            .iter()
            .filter_map(|f| f.global.as_ref())
            .map(|g| format!("{}.{}", g.module, g.name))
            .collect();
        allowed_globals = names.into_iter().collect();
    }
    Some(FileReport {
        path: path.to_owned(),
        format: None,
        tensors: 0,
        storages: 0,
        bytes: 0,
        devices: Vec::new(),
        dtypes: Vec::new(),
        checked,
        findings,
        suppressed: Vec::new(),
        allowed_globals,
        memory: None,
        device: None,
        remote: None,
        inventory: None,
        layout: None,
    })
}

/// The report of a model directory's signature check: one entry named by the signature
/// file, with the provenance rules (TP801–TP805) that the configuration and the selection
/// keep, at their configured levels.
pub fn signature_report(
    outcome: &crate::provenance::Outcome,
    config: &Config,
    options: &Options,
) -> FileReport {
    let path = outcome.facts.signature.as_str();
    let rules: Vec<(&'static dyn Rule, Severity)> = RULES
        .iter()
        .copied()
        .filter(|r| r.code().as_str().starts_with("TP8"))
        .filter(|r| options.selects(r.code()))
        .filter(|r| !config.ignored(path, r.code()))
        .filter_map(|r| match config.level(r.code()) {
            None => Some((r, r.default_severity())),
            Some(level) => level.severity().map(|s| (r, s)),
        })
        .collect();
    let findings = crate::rules::provenance::drafts(outcome)
        .into_iter()
        .filter_map(|(code, draft)| {
            let (rule, severity) = rules.iter().find(|(r, _)| r.code() == code)?;
            Some(finding(*rule, *severity, draft))
        })
        .collect();
    FileReport {
        path: path.to_owned(),
        format: Some("oms-signature".to_owned()),
        tensors: 0,
        storages: 0,
        bytes: 0,
        devices: Vec::new(),
        dtypes: Vec::new(),
        checked: rules.iter().map(|(r, _)| r.code()).collect(),
        findings,
        suppressed: Vec::new(),
        allowed_globals: Vec::new(),
        memory: None,
        device: None,
        remote: None,
        inventory: None,
        layout: None,
    }
}

/// A rule's draft as reports carry it: every name and the message bounded, so no finding
/// outgrows what a CI log, a JUnit or SARIF consumer takes, however long a file's names are.
fn finding(rule: &dyn Rule, severity: Severity, draft: Draft) -> Finding {
    Finding {
        code: rule.code(),
        severity,
        tensors: draft
            .tensors
            .into_iter()
            .map(|name| bounded(name, bounded_name))
            .collect(),
        storage: draft.storage,
        message: bounded(draft.message, bounded_message),
        fix: draft.fix,
        global: draft.global.map(|g| GlobalRef {
            module: bounded(g.module, bounded_name),
            name: bounded(g.name, bounded_name),
            member: bounded(g.member, bounded_name),
            offset: g.offset,
        }),
        template: draft.template.map(|t| crate::finding::TemplateRef {
            location: t.location.map(|l| bounded(l, bounded_name)),
            ..t
        }),
        payload: draft.payload,
        fingerprint: String::new(),
    }
}

/// `text`, or its bounded form where `bound` shortens it.
fn bounded(text: String, bound: fn(&str) -> Cow<'_, str>) -> String {
    let short = match bound(&text) {
        Cow::Owned(short) => Some(short),
        Cow::Borrowed(_) => None,
    };
    short.unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use crate::options::Options;
    use crate::testing::{checkpoint, storage, tensor};
    use tensorplay_engine::Device;

    /// Codes found, within `max_memory`, when 2 000 views of one storage have the
    /// `(size, offset)` that `view` gives each index.
    fn views_of_one_storage(
        view: impl Fn(u64) -> (u64, u64),
        max_memory: u64,
    ) -> Vec<&'static str> {
        let s = storage(0, 20_000, "cpu");
        let tensors = (0..2_000)
            .map(|i| {
                let (size, offset) = view(i);
                tensor(&format!("flat.{i}"), &s, &[size], &[1], offset, Device::Cpu)
            })
            .collect();
        let options = Options {
            max_memory: Some(max_memory),
            ..Options::default()
        };
        let ckpt = checkpoint(tensors, vec![s]);
        let report = super::audit(&ckpt, "f.pt", &Default::default(), &options, None);
        report.findings.iter().map(|f| f.code.as_str()).collect()
    }

    /// 2 000 views of one storage, each a prefix of the next: every pair shares bytes.
    fn prefix_chain() -> tensorplay_engine::Checkpoint {
        let s = storage(0, 20_000, "cpu");
        let tensors = (0..2_000)
            .map(|i| tensor(&format!("flat.{i}"), &s, &[i + 1], &[1], 0, Device::Cpu))
            .collect();
        checkpoint(tensors, vec![s])
    }

    #[test]
    fn a_views_refusal_names_the_globals_the_reading_met() {
        // Refused before relating; the reading had met a global (an object array np.load
        // would unpickle, say), which the refusal names.
        let mut ckpt = prefix_chain();
        ckpt.unsafe_globals
            .push(tensorplay_engine::pickle::UnsafeGlobal {
                module: "os".into(),
                name: "system".into(),
                member: "m/x.npy".into(),
                position: 0,
                payload: String::new(),
            });
        let options = Options {
            max_memory: Some(64 << 20),
            ..Options::default()
        };
        let report = super::audit(&ckpt, "f.pt", &Default::default(), &options, None);
        let codes: Vec<&str> = report.findings.iter().map(|f| f.code.as_str()).collect();
        assert!(
            codes.contains(&"TP506") && codes.contains(&"TP501"),
            "{codes:?}"
        );
    }

    #[test]
    fn a_flat_buffer_is_related_and_views_that_all_overlap_are_refused() {
        const BUDGET: u64 = 64 << 20;
        // Side by side (a flat buffer), each overlapping its neighbours, or all one view
        // (ties): 2 million identical pairs (48 MB) and a few findings per view fit.
        for (expected, view) in [
            ("TP106", (|i| (4, 4 * i)) as fn(u64) -> (u64, u64)),
            ("TP101", |i| (4, 3 * i)),
            ("TP103", |_| (4, 0)),
        ] {
            let codes = views_of_one_storage(view, BUDGET);
            assert!(codes.contains(&expected), "{expected}: {codes:?}");
            assert!(!codes.contains(&"TP506"), "{expected}: {codes:?}");
        }
        // Each view a prefix of the next: every pair shares bytes and may be reported, so
        // 2 million findings would not fit; refused before relating anything, over budget
        // (not corrupt).
        assert_eq!(views_of_one_storage(|i| (i + 1, 0), BUDGET), ["TP506"]);
        // Disjoint views list no pair: the flat buffer costs only its 2 000 views, and fits
        // in 1 MiB, where the 2 million pairs of the ties do not fit in 16 MiB.
        let flat = views_of_one_storage(|i| (4, 4 * i), 1 << 20);
        assert!(flat.contains(&"TP106"), "{flat:?}");
        assert!(!flat.contains(&"TP506"), "{flat:?}");
        assert_eq!(views_of_one_storage(|_| (4, 0), 16 << 20), ["TP506"]);
        // Neighbours that overlap list a pair each: 2 000 findings' worth fits in 4 MiB.
        let neighbours = views_of_one_storage(|i| (4, 3 * i), 4 << 20);
        assert!(!neighbours.contains(&"TP506"), "{neighbours:?}");
    }

    /// What the read holds is part of what relating the views would bring it to: the refusal
    /// compares the whole against the budget the flag set, not against what was left of it.
    #[test]
    fn a_views_refusal_is_stated_against_the_whole_budget() {
        let mut ckpt = prefix_chain();
        let options = Options {
            max_memory: Some(64 << 20),
            ..Options::default()
        };
        let mut refused = |held| {
            ckpt.held_bytes = held;
            match super::views_within_budget(&ckpt, "f.pt", &options) {
                Err(tensorplay_engine::Error::MemoryBudget { needed, limit, .. }) => {
                    (needed, limit)
                }
                other => panic!("{other:?}"),
            }
        };
        let (alone, limit) = refused(0);
        assert_eq!(limit, 64 << 20);
        assert_eq!(refused(1 << 20), (alone + (1 << 20), 64 << 20));
    }
}
