//! `tensorplay.toml`: rule levels, thresholds, allowed devices, the tied-weight allowlist and
//! per-path ignores. Unknown keys and unknown rules are errors that name the line.

use crate::error::{Error, Result};
use crate::registry;
use crate::severity::Level;
use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tensorplay_engine::alloc::AllocatorConfig;
use toml::Spanned;

/// The file tensorplay looks for in the working directory.
pub const FILE_NAME: &str = "tensorplay.toml";

/// Numbers rules compare against.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    rules: BTreeMap<Spanned<String>, Level>,
    #[serde(default)]
    allowed_devices: Option<Vec<String>>,
    #[serde(default)]
    thresholds: Thresholds,
    #[serde(default)]
    tied_weights: RawTied,
    #[serde(default)]
    ignore: Vec<RawIgnore>,
    #[serde(default)]
    allocator: RawAllocator,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAllocator {
    /// PYTORCH_CUDA_ALLOC_CONF syntax: `max_split_size_mb:128,roundup_power2_divisions:4`.
    #[serde(default)]
    conf: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTied {
    #[serde(default)]
    allow: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIgnore {
    path: Spanned<String>,
    rules: Vec<Spanned<String>>,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    levels: HashMap<&'static str, Level>,
    /// Devices storages may be saved from without TP202 (`["cpu"]` by default).
    pub allowed_devices: Vec<String>,
    /// Rule thresholds.
    pub thresholds: Thresholds,
    tied_allow: GlobSet,
    ignores: Vec<(GlobSet, Vec<&'static str>)>,
    /// Caching-allocator settings for the simulated load (TP302, TP303).
    pub allocator: AllocatorConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            levels: HashMap::new(),
            allowed_devices: vec!["cpu".to_owned()],
            thresholds: Thresholds::default(),
            tied_allow: GlobSet::empty(),
            ignores: Vec::new(),
            allocator: AllocatorConfig::default(),
        }
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        Config::parse(path, &text)
    }

    /// Validates config text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Config> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| Error::ConfigSyntax {
            path: path.to_owned(),
            detail: e.to_string().trim_end().replace('\n', " "),
        })?;
        let line = |span: std::ops::Range<usize>| {
            text.get(..span.start)
                .map_or(1, |t| t.matches('\n').count() + 1)
        };
        let rule_code = |name: &Spanned<String>| {
            registry::find(name.get_ref())
                .map(|r| r.code())
                .ok_or_else(|| Error::UnknownRuleInConfig {
                    path: path.to_owned(),
                    line: line(name.span()),
                    rule: name.get_ref().clone(),
                })
        };
        let glob_set = |globs: &[Spanned<String>]| -> Result<GlobSet> {
            let mut builder = GlobSetBuilder::new();
            for g in globs {
                let glob = Glob::new(g.get_ref()).map_err(|e| Error::BadGlob {
                    path: path.to_owned(),
                    line: line(g.span()),
                    glob: g.get_ref().clone(),
                    detail: e.kind().to_string(),
                })?;
                builder.add(glob);
            }
            builder.build().map_err(|e| Error::ConfigSyntax {
                path: path.to_owned(),
                detail: e.to_string(),
            })
        };

        let mut levels = HashMap::new();
        for (name, level) in &raw.rules {
            levels.insert(rule_code(name)?, *level);
        }
        let mut ignores = Vec::new();
        for entry in &raw.ignore {
            let codes = entry
                .rules
                .iter()
                .map(rule_code)
                .collect::<Result<Vec<_>>>()?;
            ignores.push((glob_set(std::slice::from_ref(&entry.path))?, codes));
        }
        let allocator = match &raw.allocator.conf {
            None => AllocatorConfig::default(),
            Some(conf) => {
                AllocatorConfig::parse(conf.get_ref()).map_err(|detail| Error::ConfigValue {
                    path: path.to_owned(),
                    line: line(conf.span()),
                    detail,
                })?
            }
        };
        Ok(Config {
            allocator,
            levels,
            allowed_devices: raw
                .allowed_devices
                .unwrap_or_else(|| vec!["cpu".to_owned()]),
            thresholds: raw.thresholds,
            tied_allow: glob_set(&raw.tied_weights.allow)?,
            ignores,
        })
    }

    /// The configured level of a rule, if any.
    pub fn level(&self, code: &str) -> Option<Level> {
        self.levels.get(code).copied()
    }

    /// Whether findings of `code` are ignored for the checkpoint at `path`.
    pub fn ignored(&self, path: &str, code: &str) -> bool {
        self.ignores
            .iter()
            .any(|(globs, codes)| codes.contains(&code) && globs.is_match(path))
    }

    /// Whether every name of a tie is on the tied-weight allowlist.
    pub fn tie_allowed(&self, names: &[&str]) -> bool {
        !self.tied_allow.is_empty() && names.iter().all(|n| self.tied_allow.is_match(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(Path::new("tensorplay.toml"), text)
    }

    #[test]
    fn a_full_config_reads() {
        let c = parse(
            r#"
allowed_devices = ["cpu", "cuda:0"]

[rules]
TP105 = "off"
"tied-alias" = "error"

[thresholds]
storage_bloat_bytes = 1024

[tied_weights]
allow = ["lm_head.weight", "*.embed_tokens.weight"]

[[ignore]]
path = "legacy/**"
rules = ["TP201", "mixed-devices"]
"#,
        )
        .unwrap();
        assert_eq!(c.level("TP105"), Some(Level::Off));
        assert_eq!(c.level("TP103"), Some(Level::Error));
        assert_eq!(c.level("TP101"), None);
        assert_eq!(c.allowed_devices, ["cpu", "cuda:0"]);
        assert_eq!(c.thresholds.storage_bloat_bytes, 1024);
        assert_eq!(c.thresholds.fragmentation_score, 5.0);
        assert!(c.tie_allowed(&["lm_head.weight", "model.embed_tokens.weight"]));
        assert!(!c.tie_allowed(&["lm_head.weight", "other"]));
        assert!(c.ignored("legacy/a/b.pt", "TP201"));
        assert!(!c.ignored("legacy/a/b.pt", "TP101"));
        assert!(!c.ignored("new/b.pt", "TP201"));
    }

    #[test]
    fn unknown_keys_and_rules_name_the_line() {
        let e = parse("[rules]\nTP105 = \"off\"\nTP999 = \"error\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "tensorplay.toml:3: unknown rule 'TP999' (see `tensorplay rules`)"
        );
        let e = parse("allowed_devices = [\"cpu\"]\nfail_fast = true\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("unknown field `fail_fast`"),
            "{e}"
        );
        let e = parse("[thresholds]\nstorage_bloat = 3\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("unknown field `storage_bloat`"),
            "{e}"
        );
        let e = parse("[rules]\nTP101 = \"fatal\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("unknown variant `fatal`"),
            "{e}"
        );
        let e = parse("[tied_weights]\nallow = [\"a[\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("tensorplay.toml:2: invalid glob 'a['"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn allocator_settings_use_pytorch_syntax() {
        let c = parse("[allocator]\nconf = \"max_split_size_mb:128\"\n").unwrap();
        assert_eq!(c.allocator.max_split_size, 128 << 20);
        let e = parse("\n[allocator]\nconf = \"max_split_size_mb:4\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("tensorplay.toml:3: "), "{e}");
    }

    #[test]
    fn an_empty_config_is_the_default() {
        let c = parse("").unwrap();
        assert_eq!(c.allowed_devices, ["cpu"]);
        assert!(!c.tie_allowed(&["a", "b"]));
    }
}
