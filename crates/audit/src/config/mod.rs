//! `tensorplay.toml`: rule levels, thresholds, allowed devices, the tied-weight allowlist,
//! per-path ignores, allocator settings and the memory budget of a read. Read in two steps: [`parse`] reads the TOML's
//! shape without knowing any rule; [`validate`] resolves rule names against the registry,
//! compiles globs and checks values. Both report every problem with its line.

mod parse;
mod size;
mod validate;

pub use crate::snippet::{diagram, Problem, Spot};
pub use size::parse_size;

use crate::error::{Error, Result};
use crate::settings::RuleSettings;
use crate::severity::Level;
use crate::text::comparable_path;
use crate::Code;
use globset::GlobSet;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tensorplay_engine::alloc::AllocatorConfig;

/// The file tensorplay looks for in the working directory.
pub const FILE_NAME: &str = "tensorplay.toml";

/// One `[[ignore]]` entry: its globs, its rules or the reason its files are skipped, and
/// whether it matched any checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct Ignore {
    pub globs: GlobSet,
    pub codes: Vec<Code>,
    /// Set when the entry has no `rules`: its files are not checkpoints and are not audited.
    pub skip: Option<String>,
    /// The `path` as written, and its line.
    pub pattern: String,
    pub line: usize,
    pub used: Arc<AtomicBool>,
}

/// An `[[ignore]]` entry that matched nothing in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnmatchedIgnore<'a> {
    /// The line of its `path`.
    pub line: usize,
    /// The `path` as written.
    pub pattern: &'a str,
    /// Whether it declares files that are not checkpoints (no `rules`, a `reason`).
    pub skips: bool,
}

/// A validated configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    levels: HashMap<Code, Level>,
    ignores: Vec<Ignore>,
    /// The file it was read from, as given: skipped files name the entry that skipped them.
    source: String,
    /// What the rules read.
    pub settings: RuleSettings,
    /// Caching-allocator settings for the simulated load (TP302, TP303).
    pub allocator: AllocatorConfig,
    /// Memory one file's read may hold (`max_memory`); `--max-memory` overrides it.
    pub max_memory: Option<u64>,
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

    /// Parses then validates config text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Config> {
        let (parsed, mut problems) = parse::parse(text);
        let mut config = validate::validate(parsed, &mut problems);
        if problems.is_empty() {
            config.source = path.display().to_string();
            return Ok(config);
        }
        problems.sort();
        problems.dedup();
        Err(Error::Config {
            path: path.to_owned(),
            problems,
            text: text.to_owned(),
        })
    }

    /// The configured level of a rule, if any.
    pub fn level(&self, code: Code) -> Option<Level> {
        self.levels.get(&code).copied()
    }

    /// Whether findings of `code` are ignored for the checkpoint at `path` (however it is
    /// spelled: `./x`, `x`, absolute).
    pub fn ignored(&self, path: &str, code: Code) -> bool {
        let path = comparable_path(path);
        let mut ignored = false;
        // Entries that skip files unaudited ignore no rule: a file they match is never here.
        for entry in self.ignores.iter().filter(|e| e.skip.is_none()) {
            if entry.globs.is_match(&path) {
                entry.used.store(true, Ordering::Relaxed);
                ignored |= entry.codes.contains(&code);
            }
        }
        ignored
    }

    /// Why the file at `path` is not to be audited, when an `[[ignore]]` entry without `rules`
    /// matches it: the entry's reason and where it is written, `not a checkpoint
    /// (tensorplay.toml:12)`. The first such entry in the file names it; every one that
    /// matches counts as used.
    pub fn skip_reason(&self, path: &str) -> Option<String> {
        let path = comparable_path(path);
        let mut first = None;
        for entry in &self.ignores {
            let Some(reason) = &entry.skip else { continue };
            if entry.globs.is_match(&path) {
                entry.used.store(true, Ordering::Relaxed);
                first.get_or_insert_with(|| format!("{reason} ({}:{})", self.source, entry.line));
            }
        }
        first
    }

    /// The `[[ignore]]` entries no checkpoint matched so far: a pattern that matches nothing
    /// is most likely misspelt.
    pub fn unmatched_ignores(&self) -> Vec<UnmatchedIgnore<'_>> {
        self.ignores
            .iter()
            .filter(|e| !e.used.load(Ordering::Relaxed))
            .map(|e| UnmatchedIgnore {
                line: e.line,
                pattern: e.pattern.as_str(),
                skips: e.skip.is_some(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{device, integrity, view};

    fn parse(text: &str) -> Result<Config> {
        Config::parse(Path::new("tensorplay.toml"), text)
    }

    fn problems(text: &str) -> Vec<String> {
        match parse(text) {
            Ok(_) => Vec::new(),
            // The first line of each problem; diagram lines (indented) are tested apart.
            Err(e) => e
                .to_string()
                .lines()
                .filter(|l| !l.starts_with(' '))
                .map(str::to_owned)
                .collect(),
        }
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
fragmentation_score = 7

[tied_weights]
allow = ["lm_head.weight", "*.embed_tokens.weight"]

[[ignore]]
path = "legacy/**"
rules = ["TP201", "mixed-devices"]
"#,
        )
        .unwrap();
        assert_eq!(c.level(view::NonContiguous::CODE), Some(Level::Off));
        assert_eq!(c.level(view::TiedAlias::CODE), Some(Level::Error));
        assert_eq!(c.level(view::ViewOverlap::CODE), None);
        let s = &c.settings;
        assert_eq!(s.allowed_devices, ["cpu", "cuda:0"]);
        assert_eq!(s.thresholds.storage_bloat_bytes, 1024);
        assert_eq!(s.thresholds.fragmentation_score, 7.0);
        assert_eq!(s.thresholds.storage_bloat_fraction, 0.10);
        assert!(s.tie_allowed(&["lm_head.weight", "model.embed_tokens.weight"]));
        assert!(!s.tie_allowed(&["lm_head.weight", "other"]));
        assert!(c.ignored("legacy/a/b.pt", device::MixedDevices::CODE));
        assert!(!c.ignored("legacy/a/b.pt", view::ViewOverlap::CODE));
        assert!(!c.ignored("new/b.pt", device::MixedDevices::CODE));
    }

    #[test]
    fn unknown_keys_and_rules_name_the_line() {
        assert_eq!(
            problems("[rules]\nTP105 = \"off\"\nTP999 = \"error\"\n"),
            ["tensorplay.toml:3: unknown rule 'TP999' (see `tensorplay rules`)"]
        );
        let e = problems("allowed_devices = [\"cpu\"]\nfail_fast = true\n");
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with(
                "tensorplay.toml:2: unknown field `fail_fast`, expected one of `rules`"
            ),
            "{e:?}"
        );
        let e = problems("[thresholds]\nstorage_bloat = 3\n");
        assert!(
            e[0].starts_with("tensorplay.toml:2: unknown field `storage_bloat`"),
            "{e:?}"
        );
        assert_eq!(
            problems("[rules]\nTP101 = \"fatal\"\n"),
            ["tensorplay.toml:2: rule 'TP101': level must be one of \"off\", \"info\", \"warning\", \"error\""]
        );
        let e = problems("[tied_weights]\nallow = [\"a[\"]\n");
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("tensorplay.toml:2: invalid glob 'a['"),
            "{e:?}"
        );
    }

    #[test]
    fn every_problem_is_reported_in_line_order() {
        let e = problems(
            r#"fail_fast = true
[rules]
TP999 = "error"
TP101 = "loud"
[thresholds]
storage_bloat_bytes = -1
fragmentation_score = "high"
colour = 3
[[ignore]]
path = "a["
rules = ["nope"]
[allocator]
conf = "max_split_size_mb:4"
"#,
        );
        let lines: Vec<&str> = e
            .iter()
            .map(|l| l.split(": ").next().unwrap_or_default())
            .collect();
        assert_eq!(
            lines,
            [
                "tensorplay.toml:1",
                "tensorplay.toml:3",
                "tensorplay.toml:4",
                "tensorplay.toml:6",
                "tensorplay.toml:7",
                "tensorplay.toml:8",
                "tensorplay.toml:10",
                "tensorplay.toml:11",
                "tensorplay.toml:13",
            ],
            "{e:#?}"
        );
    }

    #[test]
    fn wrong_types_are_problems_not_defaults() {
        assert_eq!(
            problems("allowed_devices = \"cpu\"\n"),
            ["tensorplay.toml:1: `allowed_devices`: expected an array of strings"]
        );
        assert_eq!(
            problems("rules = 3\n"),
            ["tensorplay.toml:1: `rules`: expected a table"]
        );
        assert_eq!(
            problems("[[ignore]]\nrules = [\"TP101\"]\n"),
            ["tensorplay.toml:1: [[ignore]] entry without `path`"]
        );
    }

    #[test]
    fn an_ignore_without_rules_skips_its_files_with_its_reason() {
        let c = parse(
            r#"[[ignore]]
path = "tokenizer/*.bin"
reason = "not a checkpoint"

[[ignore]]
path = "legacy/**"
rules = ["TP201"]
reason = "moved off the GPU in the next release"

[[ignore]]
path = "tokenizer/vocab.bin"
reason = "sentencepiece vocabulary"
"#,
        )
        .unwrap();
        let unmatched = |c: &Config| -> Vec<(usize, bool)> {
            c.unmatched_ignores()
                .iter()
                .map(|u| (u.line, u.skips))
                .collect()
        };
        assert_eq!(unmatched(&c), [(2, true), (6, false), (11, true)]);
        assert_eq!(
            c.skip_reason("tokenizer/merges.bin").as_deref(),
            Some("not a checkpoint (tensorplay.toml:2)")
        );
        // However the path is spelled; the first entry that matches names the reason, and
        // every one that matches counts as used.
        assert_eq!(
            c.skip_reason("./tokenizer//vocab.bin").as_deref(),
            Some("not a checkpoint (tensorplay.toml:2)")
        );
        assert_eq!(unmatched(&c), [(6, false)]);
        assert_eq!(c.skip_reason("other/merges.bin"), None);
        assert_eq!(c.skip_reason("model.bin"), None);
        // An entry with rules keeps its meaning whatever its reason: it skips nothing.
        assert_eq!(c.skip_reason("legacy/a.pt"), None);
        assert!(c.ignored("legacy/a.pt", device::MixedDevices::CODE));
        // A skipping entry ignores no rule: the file it matches is never audited.
        assert!(!c.ignored("tokenizer/merges.bin", view::ViewOverlap::CODE));
        // The reason names the file it was read from.
        let c = Config::parse(
            Path::new("conf/audit.toml"),
            "\n[[ignore]]\npath = \"*.bin\"\nreason = \"tokenizer\"\n",
        )
        .unwrap();
        assert_eq!(
            c.skip_reason("a.bin").as_deref(),
            Some("tokenizer (conf/audit.toml:3)")
        );
    }

    #[test]
    fn an_ignore_needs_rules_or_a_reason_that_says_something() {
        assert_eq!(
            problems("\n[[ignore]]\npath = \"a.bin\"\n"),
            ["tensorplay.toml:2: [[ignore]] entry needs `rules` (the rules to ignore on these paths) or `reason` (why these files are not checkpoints, to skip them unaudited)"]
        );
        assert_eq!(
            problems("[[ignore]]\npath = \"a.bin\"\nreason = \"  \"\n"),
            ["tensorplay.toml:3: `reason` is empty: say why these files are not audited (e.g. \"not a checkpoint\")"]
        );
        assert_eq!(
            problems("[[ignore]]\npath = \"a.bin\"\nreason = 3\n"),
            ["tensorplay.toml:3: `reason`: expected a string"]
        );
        assert_eq!(
            problems("[[ignore]]\npath = \"a.bin\"\nrules = []\nreason = \"x\"\n"),
            ["tensorplay.toml:3: `rules` is empty: name the rules to ignore, or leave `rules` out and give a `reason` to skip the files unaudited"]
        );
        let e = problems("[[ignore]]\npath = \"a.bin\"\nreason = \"x\"\nwhy = \"y\"\n");
        assert_eq!(
            e,
            ["tensorplay.toml:4: unknown field `why`, expected one of `path`, `rules`, `reason`"]
        );
        // The caret sits under the empty reason.
        let Err(e) = parse("[[ignore]]\npath = \"a.bin\"\nreason = \"\"\n") else {
            panic!("an empty reason is a problem");
        };
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "  3 | reason = \"\"", "{text}");
        assert_eq!(lines[2], "    |          ^^", "{text}");
    }

    #[test]
    fn a_toml_syntax_error_names_its_line() {
        let e = problems("[rules]\nTP101 = \n");
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("tensorplay.toml:2: "), "{e:?}");
    }

    #[test]
    fn each_problem_shows_its_line_and_a_caret_under_it() {
        let text = format!("{}[rules]\nTP10 = \"off\"\n", "\n".repeat(9));
        let Err(e) = parse(&text) else {
            panic!("an unknown rule is a problem");
        };
        assert_eq!(
            e.to_string(),
            "tensorplay.toml:11: unknown rule 'TP10' (did you mean TP101 view-overlap?)\n\
             \x20 11 | TP10 = \"off\"\n\
             \x20    | ^^^^"
        );
        let Err(e) = parse("[rules]\nTP101 = \n") else {
            panic!("a syntax error is a problem");
        };
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[1], "  2 | TP101 = ", "{text}");
        assert!(
            lines[2].starts_with("    | ") && lines[2].ends_with('^'),
            "{text}"
        );
    }

    #[test]
    fn rules_that_report_unreadable_files_cannot_be_configured() {
        for name in [
            integrity::CorruptFile::CODE.as_str(),
            integrity::IndexMismatch::CODE.name(),
        ] {
            let e = problems(&format!("[rules]\n\"{name}\" = \"off\"\n"));
            assert_eq!(e.len(), 1);
            assert!(e[0].contains("cannot be configured"), "{e:?}");
            let e = problems(&format!(
                "[[ignore]]\npath = \"**\"\nrules = [\"{name}\"]\n"
            ));
            assert!(e[0].contains("cannot be configured"), "{e:?}");
        }
    }

    #[test]
    fn allocator_settings_use_pytorch_syntax() {
        let c = parse("[allocator]\nconf = \"max_split_size_mb:128\"\n").unwrap();
        assert_eq!(c.allocator.max_split_size, 128 << 20);
        let e = problems("\n[allocator]\nconf = \"max_split_size_mb:4\"\n");
        assert!(e[0].starts_with("tensorplay.toml:3: "), "{e:?}");
    }

    #[test]
    fn max_memory_takes_the_flag_s_sizes_or_bytes() {
        assert_eq!(
            parse("max_memory = \"512MiB\"\n").unwrap().max_memory,
            Some(512 << 20)
        );
        assert_eq!(
            parse("max_memory = \"1.5 GB\"\n").unwrap().max_memory,
            Some(1_500_000_000)
        );
        assert_eq!(parse("max_memory = 4096\n").unwrap().max_memory, Some(4096));
        assert_eq!(parse("").unwrap().max_memory, None);
        assert_eq!(
            problems("\nmax_memory = \"12 parsecs\"\n"),
            ["tensorplay.toml:2: `max_memory`: unknown unit 'parsecs' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"]
        );
        assert_eq!(
            problems("max_memory = 0\n"),
            ["tensorplay.toml:1: `max_memory`: '0' is out of range"]
        );
        assert_eq!(
            problems("max_memory = true\n"),
            ["tensorplay.toml:1: `max_memory`: expected a size like \"512MiB\" or a number of bytes"]
        );
        // The caret sits under the value, as for the other keys.
        let Err(e) = parse("max_memory = \"lots\"\n") else {
            panic!("not a size");
        };
        let text = e.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "  1 | max_memory = \"lots\"", "{text}");
        assert_eq!(lines[2], "    |              ^^^^^^", "{text}");
    }

    #[test]
    fn an_empty_config_is_the_default() {
        let c = parse("").unwrap();
        assert_eq!(c.settings.allowed_devices, ["cpu"]);
        assert!(!c.settings.tie_allowed(&["a", "b"]));
    }
}
