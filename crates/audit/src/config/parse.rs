//! First step of reading `tensorplay.toml`: the TOML's shape, without knowing any rule.
//! Every unknown key and every value of the wrong type is a problem with its line; reading
//! goes on past each one, so one run shows them all.

use super::{Problem, Spot};
use crate::settings::Thresholds;
use crate::severity::Level;
use std::ops::Range;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// A value with where it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct At<T> {
    pub value: T,
    pub spot: Spot,
}

/// One `[[ignore]]` entry.
#[derive(Debug, Default)]
pub(crate) struct IgnoreEntry {
    pub path: Option<At<String>>,
    pub rules: Vec<At<String>>,
    /// Whether `rules` was written at all: an entry without it skips its files unaudited.
    pub has_rules: bool,
    /// Why its files are not checkpoints (required when `rules` is absent).
    pub reason: Option<At<String>>,
    pub spot: Spot,
}

/// The file as written: rule names not yet resolved, globs not yet compiled.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub levels: Vec<(At<String>, Level)>,
    pub allowed_devices: Option<Vec<String>>,
    pub thresholds: Thresholds,
    pub tied_allow: Vec<At<String>>,
    pub ignores: Vec<IgnoreEntry>,
    pub allocator_conf: Option<At<String>>,
    /// `[pickle] allow_globals`, checked by validate.
    pub allow_globals: Vec<At<String>>,
    /// `[pickle] allow_presets`, checked by validate.
    pub allow_presets: Vec<At<String>>,
    /// `max_memory` as written: a size string or a number of bytes, checked by `validate`.
    pub max_memory: Option<At<MaxMemory>>,
}

/// `max_memory` before its size is checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum MaxMemory {
    Text(String),
    Bytes(i64),
}

const TOP_KEYS: &[&str] = &[
    "rules",
    "allowed_devices",
    "thresholds",
    "tied_weights",
    "ignore",
    "allocator",
    "pickle",
    "max_memory",
];
const THRESHOLD_KEYS: &[&str] = &[
    "storage_bloat_bytes",
    "storage_bloat_fraction",
    "fragmentation_score",
    "allocator_overhead",
    "allocator_overhead_bytes",
];

type Value<'i> = Spanned<DeValue<'i>>;

/// Reads the text into what it says, with every problem found on the way.
pub(crate) fn parse(text: &str) -> (Parsed, Vec<Problem>) {
    let mut reader = Reader {
        text,
        problems: Vec::new(),
    };
    let mut parsed = Parsed::default();
    match DeTable::parse(text) {
        Ok(root) => reader.root(root.get_ref(), &mut parsed),
        Err(e) => {
            let spot = reader.spot(e.span().unwrap_or(0..0));
            reader.problem(spot, e.message().trim_end().replace('\n', " "));
        }
    }
    (parsed, reader.problems)
}

struct Reader<'t> {
    text: &'t str,
    problems: Vec<Problem>,
}

impl Reader<'_> {
    fn spot(&self, span: Range<usize>) -> Spot {
        Spot::of(self.text, span)
    }

    fn problem(&mut self, spot: Spot, detail: impl Into<String>) {
        self.problems.push(Problem::new(spot, detail));
    }

    /// The entries of a table, each unknown key reported once.
    fn entries<'a, 'i>(
        &mut self,
        table: &'a DeTable<'i>,
        known: &[&str],
    ) -> Vec<(&'a str, &'a Value<'i>)> {
        let mut kept = Vec::new();
        for (key, value) in table {
            if known.is_empty() || known.contains(&key.get_ref().as_ref()) {
                kept.push((key.get_ref().as_ref(), value));
            } else {
                let expected: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
                let spot = self.spot(key.span());
                self.problem(
                    spot,
                    format!(
                        "unknown field `{}`, expected one of {}",
                        key.get_ref(),
                        expected.join(", ")
                    ),
                );
            }
        }
        kept
    }

    fn root(&mut self, root: &DeTable<'_>, out: &mut Parsed) {
        for (key, value) in self.entries(root, TOP_KEYS) {
            match key {
                "rules" => self.rules(value, out),
                "allowed_devices" => {
                    out.allowed_devices = self
                        .strings(key, value)
                        .map(|v| v.into_iter().map(|s| s.value).collect())
                }
                "thresholds" => self.thresholds(value, &mut out.thresholds),
                "tied_weights" => {
                    if let Some(table) = self.table(key, value) {
                        for (key, value) in self.entries(table, &["allow"]) {
                            out.tied_allow = self.strings(key, value).unwrap_or_default();
                        }
                    }
                }
                "ignore" => self.ignores(value, out),
                "pickle" => self.pickle(value, out),
                "max_memory" => out.max_memory = self.max_memory(value),
                _ => {
                    if let Some(table) = self.table(key, value) {
                        for (key, value) in self.entries(table, &["conf"]) {
                            out.allocator_conf = self.string(key, value);
                        }
                    }
                }
            }
        }
    }

    fn rules(&mut self, value: &Value<'_>, out: &mut Parsed) {
        let Some(table) = self.table("rules", value) else {
            return;
        };
        for (name, level) in table {
            let spot = self.spot(level.span());
            let parsed = match level.get_ref().as_str() {
                Some("off") => Level::Off,
                Some("info") => Level::Info,
                Some("warning") => Level::Warning,
                Some("error") => Level::Error,
                _ => {
                    self.problem(
                        spot,
                        format!(
                            "rule '{}': level must be one of \"off\", \"info\", \"warning\", \"error\"",
                            name.get_ref()
                        ),
                    );
                    continue;
                }
            };
            let at = At {
                value: name.get_ref().to_string(),
                spot: self.spot(name.span()),
            };
            out.levels.push((at, parsed));
        }
    }

    fn thresholds(&mut self, value: &Value<'_>, out: &mut Thresholds) {
        let Some(table) = self.table("thresholds", value) else {
            return;
        };
        for (key, value) in self.entries(table, THRESHOLD_KEYS) {
            match key {
                "storage_bloat_bytes" => self.set_u64(key, value, &mut out.storage_bloat_bytes),
                "allocator_overhead_bytes" => {
                    self.set_u64(key, value, &mut out.allocator_overhead_bytes)
                }
                "storage_bloat_fraction" => {
                    self.set_f64(key, value, &mut out.storage_bloat_fraction)
                }
                "fragmentation_score" => self.set_f64(key, value, &mut out.fragmentation_score),
                _ => self.set_f64(key, value, &mut out.allocator_overhead),
            }
        }
    }

    fn ignores(&mut self, value: &Value<'_>, out: &mut Parsed) {
        let Some(items) = value.get_ref().as_array() else {
            let spot = self.spot(value.span());
            self.problem(spot, "`ignore`: expected an array of tables ([[ignore]])");
            return;
        };
        for item in items.iter() {
            let Some(table) = self.table("ignore", item) else {
                continue;
            };
            let mut entry = IgnoreEntry {
                spot: self.spot(item.span()),
                ..IgnoreEntry::default()
            };
            // A `reason` of the wrong type or empty is its own problem, not also a missing one.
            let mut has_reason = false;
            for (key, value) in self.entries(table, &["path", "rules", "reason"]) {
                match key {
                    "path" => entry.path = self.string(key, value),
                    "reason" => {
                        has_reason = true;
                        entry.reason = self.reason(value);
                    }
                    _ => {
                        entry.has_rules = true;
                        entry.rules = self.strings(key, value).unwrap_or_default();
                        // `rules = []` ignores nothing and skips nothing: most likely a
                        // half-edited entry, so it is said rather than guessed at.
                        if value.get_ref().as_array().is_some_and(|a| a.is_empty()) {
                            let spot = self.spot(value.span());
                            self.problem(
                                spot,
                                "`rules` is empty: name the rules to ignore, or leave `rules` out and give a `reason` to skip the files unaudited",
                            );
                        }
                    }
                }
            }
            if entry.path.is_none() {
                self.problem(entry.spot, "[[ignore]] entry without `path`");
            }
            if !entry.has_rules && !has_reason {
                self.problem(
                    entry.spot,
                    "[[ignore]] entry needs `rules` (the rules to ignore on these paths) or `reason` (why these files are not checkpoints, to skip them unaudited)",
                );
            }
            out.ignores.push(entry);
        }
    }

    /// An `[[ignore]]` entry's `reason`: shown beside every file it skips, so it must say
    /// something.
    fn reason(&mut self, value: &Value<'_>) -> Option<At<String>> {
        let reason = self.string("reason", value)?;
        if reason.value.trim().is_empty() {
            self.problem(
                reason.spot,
                "`reason` is empty: say why these files are not audited (e.g. \"not a checkpoint\")",
            );
            return None;
        }
        Some(reason)
    }

    /// `[pickle]`: the globals and presets TP501 accepts, as written (checked by validate).
    fn pickle(&mut self, value: &Value<'_>, out: &mut Parsed) {
        if let Some(table) = self.table("pickle", value) {
            for (key, value) in self.entries(table, &["allow_globals", "allow_presets"]) {
                let strings = self.strings(key, value).unwrap_or_default();
                match key {
                    "allow_presets" => out.allow_presets = strings,
                    _ => out.allow_globals = strings,
                }
            }
        }
    }

    fn table<'a, 'i>(&mut self, key: &str, value: &'a Value<'i>) -> Option<&'a DeTable<'i>> {
        let table = value.get_ref().as_table();
        if table.is_none() {
            let spot = self.spot(value.span());
            self.problem(spot, format!("`{key}`: expected a table"));
        }
        table
    }

    fn string(&mut self, key: &str, value: &Value<'_>) -> Option<At<String>> {
        let spot = self.spot(value.span());
        match value.get_ref().as_str() {
            Some(s) => Some(At {
                value: s.to_owned(),
                spot,
            }),
            None => {
                self.problem(spot, format!("`{key}`: expected a string"));
                None
            }
        }
    }

    fn strings(&mut self, key: &str, value: &Value<'_>) -> Option<Vec<At<String>>> {
        let Some(items) = value.get_ref().as_array() else {
            let spot = self.spot(value.span());
            self.problem(spot, format!("`{key}`: expected an array of strings"));
            return None;
        };
        let all: Vec<Option<At<String>>> = items.iter().map(|v| self.string(key, v)).collect();
        all.into_iter().collect()
    }

    /// A size (`"512MiB"`) or a number of bytes; anything else is a problem here.
    fn max_memory(&mut self, value: &Value<'_>) -> Option<At<MaxMemory>> {
        let spot = self.spot(value.span());
        let parsed = match value.get_ref() {
            DeValue::String(s) => Some(MaxMemory::Text(s.to_string())),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(MaxMemory::Bytes),
            _ => None,
        };
        if parsed.is_none() {
            self.problem(
                spot,
                "`max_memory`: expected a size like \"512MiB\" or a number of bytes",
            );
        }
        parsed.map(|value| At { value, spot })
    }

    fn set_u64(&mut self, key: &str, value: &Value<'_>, out: &mut u64) {
        let parsed = value
            .get_ref()
            .as_integer()
            .and_then(|i| u64::from_str_radix(i.as_str(), i.radix()).ok());
        match parsed {
            Some(n) => *out = n,
            None => {
                let spot = self.spot(value.span());
                self.problem(spot, format!("`{key}`: expected a non-negative integer"));
            }
        }
    }

    fn set_f64(&mut self, key: &str, value: &Value<'_>, out: &mut f64) {
        let parsed = match value.get_ref() {
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            _ => None,
        };
        match parsed {
            Some(x) if x.is_finite() && x >= 0.0 => *out = x,
            _ => {
                let spot = self.spot(value.span());
                self.problem(spot, format!("`{key}`: expected a non-negative number"));
            }
        }
    }
}
