//! What rules may read of the configuration: thresholds, allowed devices, the tied-weight
//! allowlist, the accepted pickle globals. Levels, ignores and allocator settings are the runner's, not a rule's.

use globset::GlobSet;

/// Numbers rules compare against.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// TP104 fires when at least this many bytes of a storage are unreachable…
    pub storage_bloat_bytes: u64,
    /// …and they are at least this fraction of the storage.
    pub storage_bloat_fraction: f64,
    /// TP301 fires above this score (variance / mean² of storage sizes).
    pub fragmentation_score: f64,
    /// TP302 fires when simulated reserved / requested bytes exceed this…
    pub allocator_overhead: f64,
    /// …and reserved exceeds requested by at least this many bytes.
    pub allocator_overhead_bytes: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            storage_bloat_bytes: 1 << 20,
            storage_bloat_fraction: 0.10,
            fragmentation_score: 5.0,
            allocator_overhead: 1.25,
            allocator_overhead_bytes: 64 << 20,
        }
    }
}

/// The settings every rule sees.
#[derive(Debug, Clone)]
pub struct RuleSettings {
    /// Devices storages may be saved from without TP202 (`["cpu"]` by default).
    pub allowed_devices: Vec<String>,
    /// Rule thresholds.
    pub thresholds: Thresholds,
    /// Tensor-name globs whose ties TP103 accepts.
    pub tied_allow: GlobSet,
    /// Exact `module.name` globals TP501 accepts (`[pickle] allow_globals`). Accepting one
    /// only stops TP501 reporting it: tensorplay never imports or calls a global.
    pub allow_globals: Vec<String>,
}

impl Default for RuleSettings {
    fn default() -> Self {
        RuleSettings {
            allowed_devices: vec!["cpu".to_owned()],
            thresholds: Thresholds::default(),
            tied_allow: GlobSet::empty(),
            allow_globals: Vec::new(),
        }
    }
}

impl RuleSettings {
    /// Whether every name of a tie is on the tied-weight allowlist.
    pub fn tie_allowed(&self, names: &[&str]) -> bool {
        !self.tied_allow.is_empty() && names.iter().all(|n| self.tied_allow.is_match(n))
    }

    /// Whether the global `module.name` is listed, exactly, in `[pickle] allow_globals`.
    pub fn global_allowed(&self, module: &str, name: &str) -> bool {
        self.allow_globals.iter().any(|g| {
            g.strip_prefix(module)
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|rest| rest == name)
        })
    }
}
