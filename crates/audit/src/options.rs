//! Command-line choices that shape a run.

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::Code;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tensorplay_engine::load::{ReadLimits, DEFAULT_MAX_MEMORY};

/// The rules `selectors` name together ([`Code::select`]: codes, prefixes or names), each
/// once, in code order; the first that names none is [`Error::UnknownRule`]. The one resolver
/// of the command's `--select`/`--ignore` and the Python package's `select=`/`ignore=`.
pub fn resolve<S: AsRef<str>>(selectors: &[S]) -> Result<Vec<Code>> {
    let mut codes = Vec::new();
    for selector in selectors {
        let selector = selector.as_ref();
        let named = Code::select(selector);
        if named.is_empty() {
            return Err(Error::UnknownRule(selector.to_owned()));
        }
        codes.extend(named);
    }
    codes.sort_unstable();
    codes.dedup();
    Ok(codes)
}

/// Command-line choices that shape a run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only these rules (empty: all).
    pub select: Vec<Code>,
    /// Never these rules.
    pub ignore: Vec<Code>,
    /// Skip rules that read tensor bytes.
    pub metadata_only: bool,
    /// GPU memory the load must fit (TP303).
    pub gpu_budget: Option<u64>,
    /// Bytes scanned so far, for a progress display.
    pub progress: Option<Arc<AtomicU64>>,
    /// Memory one file's read may hold (`--max-memory`); `None` is the engine's default.
    pub max_memory: Option<u64>,
    /// The layout every checkpoint must fit (`--expect`, TP601).
    pub expect: Option<Arc<Manifest>>,
    /// The chat templates every checkpoint may carry (`--template-baseline`, TP706).
    pub template_baseline: Option<Arc<crate::template::TemplateBaseline>>,
    /// Keep the storage-size and segment-map facts a display draws (the HTML report): one
    /// block per storage, so only kept when something will show them.
    pub layout_facts: bool,
    /// Gather each checkpoint's inventory for a bill of materials (`--cyclonedx`).
    pub inventory: bool,
    /// With `--partition`, this part's share of a sharded set's byte scan; `None` scans all.
    pub scan_share: Option<Arc<crate::share::ScanShare>>,
}

impl Options {
    /// Resolves `--select`/`--ignore` values (codes, code prefixes or names: [`resolve`]).
    pub fn new(select: &[String], ignore: &[String], metadata_only: bool) -> Result<Options> {
        Ok(Options {
            select: resolve(select)?,
            ignore: resolve(ignore)?,
            metadata_only,
            gpu_budget: None,
            progress: None,
            max_memory: None,
            expect: None,
            template_baseline: None,
            layout_facts: false,
            inventory: false,
            scan_share: None,
        })
    }

    /// What a file's read may take. Metadata-only leaves compressed storages unread, unless
    /// the checkpoint is also loaded onto a GPU, which needs every byte in memory.
    pub fn read_limits(&self, loads_to_gpu: bool) -> ReadLimits {
        ReadLimits {
            max_memory: self.max_memory.unwrap_or(DEFAULT_MAX_MEMORY),
            storage_bytes: !self.metadata_only || loads_to_gpu,
            hold_storages: loads_to_gpu,
        }
    }

    /// Whether `--select`/`--ignore` let this rule run.
    pub fn selects(&self, code: Code) -> bool {
        (self.select.is_empty() || self.select.contains(&code)) && !self.ignore.contains(&code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_resolve_to_each_rule_once_or_name_the_unknown_one() {
        let codes = resolve(&["TP50", "unsafe-global", "tp101"]).unwrap();
        let codes: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            codes,
            ["TP101", "TP501", "TP502", "TP503", "TP504", "TP505", "TP506"]
        );
        let err = resolve(&["TP1", "TP109"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown rule 'TP109' (did you mean TP101 view-overlap?)"
        );
    }

    #[test]
    fn a_prefix_selects_and_ignores_every_rule_it_begins() {
        let options = Options::new(&["TP1".into()], &["TP103".into()], false).unwrap();
        for code in Code::ALL {
            let expected = code.as_str().starts_with("TP1") && code.as_str() != "TP103";
            assert_eq!(options.selects(*code), expected, "{code}");
        }
    }
}
