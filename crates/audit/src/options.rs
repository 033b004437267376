//! Command-line choices that shape a run.

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::Code;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tensorplay_engine::load::{ReadLimits, DEFAULT_MAX_MEMORY};

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
}

impl Options {
    /// Resolves `--select`/`--ignore` values (codes or names).
    pub fn new(select: &[String], ignore: &[String], metadata_only: bool) -> Result<Options> {
        let resolve = |names: &[String]| {
            names
                .iter()
                .map(|n| Code::find(n).ok_or_else(|| Error::UnknownRule(n.clone())))
                .collect::<Result<Vec<_>>>()
        };
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
