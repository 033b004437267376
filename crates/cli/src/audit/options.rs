//! The options of an audit, one typed field each: the command's flags (clap) and the Python
//! API's keyword arguments (serde, from the extension) fill these same structs, so the two
//! cannot drift and no option is mapped through a flag's name.

use clap::{Args, ValueEnum};
use serde::de::{self, Deserializer, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::PathBuf;
use tensorplay_audit::report::FailOn;

/// Seconds one file may take by default before it fails TP506 unjudged.
const TIMEOUT_PER_FILE: u64 = 600;

/// What judges findings, for files and live tensors alike.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuleOptions {
    /// Configuration file [default: ./tensorplay.toml if present].
    #[arg(long, value_name = "FILE")]
    #[serde(deserialize_with = "path")]
    pub config: Option<PathBuf>,
    /// Lowest severity that fails the run (exit 1).
    #[arg(long, value_enum, default_value_t = FailOnArg::Error)]
    #[serde(deserialize_with = "fail_on")]
    pub fail_on: FailOnArg,
    /// Run only these rules: codes (TP101), code prefixes (TP1, TP50) or names (unsafe-global);
    /// repeat or separate with commas.
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    #[serde(deserialize_with = "rules")]
    pub select: Vec<String>,
    /// Do not run these rules (codes, code prefixes or names, as for --select).
    #[arg(long, value_name = "RULE", value_delimiter = ',')]
    #[serde(deserialize_with = "rules")]
    pub ignore: Vec<String>,
    /// Fail only on findings not recorded in this baseline.
    #[arg(long, value_name = "FILE")]
    #[serde(deserialize_with = "path")]
    pub baseline: Option<PathBuf>,
    /// Read no tensor bytes: skip the rules that scan values (TP401).
    #[arg(long)]
    #[serde(deserialize_with = "strict_bool")]
    pub metadata_only: bool,
    /// GPU memory the simulated load must fit (TP303), e.g. 24GiB.
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size)]
    #[serde(deserialize_with = "size")]
    pub gpu_budget: Option<u64>,
    /// Memory reading one file may take (inflated records, heap storages, pickle values);
    /// a file needing more fails TP506 (over-budget) [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size)]
    #[serde(deserialize_with = "size")]
    pub max_memory: Option<u64>,
    /// Fail every checkpoint that does not fit this layout (TP601): missing or unexpected
    /// tensors, other shapes, dtypes or devices. LAYOUT is a file written by
    /// `tensorplay inspect --format layout`, or another checkpoint.
    #[arg(long, value_name = "LAYOUT")]
    #[serde(deserialize_with = "path")]
    pub expect: Option<PathBuf>,
}

/// What only an audit of files takes: live tensors are not loaded, timed or templated.
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileOptions {
    /// Also load every checkpoint onto this GPU (`cuda:N`) through pinned staging and the
    /// caching allocator, and check every DataPtr (TP203); `auto` loads onto cuda:0 when a
    /// GPU is present and notes that it skipped otherwise.
    #[arg(long, value_name = "DEVICE")]
    pub load_to: Option<String>,
    /// Fail every chat template whose SHA-256 this file does not list (TP706): one
    /// `sha256sum` line per template served.
    #[arg(long, value_name = "FILE")]
    #[serde(deserialize_with = "path")]
    pub template_baseline: Option<PathBuf>,
    /// Exit 0 with an empty report when no checkpoint is found, instead of 2.
    #[arg(long)]
    #[serde(deserialize_with = "strict_bool")]
    pub allow_empty: bool,
    /// Seconds one file may take before it fails TP506 (over-budget) unjudged, never a hang.
    #[arg(long, value_name = "SECONDS", default_value_t = TIMEOUT_PER_FILE, value_parser = clap::value_parser!(u64).range(1..))]
    #[serde(deserialize_with = "positive")]
    pub timeout_per_file: u64,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            load_to: None,
            template_baseline: None,
            allow_empty: false,
            timeout_per_file: TIMEOUT_PER_FILE,
        }
    }
}

/// `--fail-on`'s levels, as typed on the command line and in Python (`fail_on="warning"`).
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum FailOnArg {
    #[default]
    Error,
    Warning,
    Never,
}

impl From<FailOnArg> for FailOn {
    fn from(arg: FailOnArg) -> FailOn {
        match arg {
            FailOnArg::Error => FailOn::Error,
            FailOnArg::Warning => FailOn::Warning,
            FailOnArg::Never => FailOn::Never,
        }
    }
}

/// Which keyword arguments an API function takes: the rule options, or those and the file
/// options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Live,
    Files,
}

/// The options of one audit.
#[derive(Debug, Clone, Default)]
pub struct AuditOptions {
    pub rules: RuleOptions,
    pub file: FileOptions,
}

/// Why keyword arguments are not options of a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionError {
    /// A name the scope has no option for; `accepted` lists those it has.
    Unexpected { name: String, accepted: Vec<String> },
    /// A value of the wrong kind (a number for a path, a string for a flag).
    Kind { name: String, detail: String },
    /// A value of the right kind the option refuses (an unknown level, a bad size).
    Value { name: String, detail: String },
}

impl AuditOptions {
    /// The option names `scope` accepts, in the order the command lists them: the fields'
    /// names, asked of clap, which knows each field by its name.
    pub fn names(scope: Scope) -> Vec<String> {
        let mut command = RuleOptions::augment_args(clap::Command::new("options"));
        if scope == Scope::Files {
            command = FileOptions::augment_args(command);
        }
        command
            .get_arguments()
            .map(|arg| arg.get_id().as_str().to_owned())
            .collect()
    }

    /// The options `entries` (a name and its value each) give in `scope`.
    pub fn from_entries(
        scope: Scope,
        entries: Vec<(String, serde_json::Value)>,
    ) -> Result<AuditOptions, OptionError> {
        let accepted = AuditOptions::names(scope);
        let file_names = FileOptions::augment_args(clap::Command::new("options"))
            .get_arguments()
            .map(|arg| arg.get_id().as_str().to_owned())
            .collect::<Vec<_>>();
        let (mut rules, mut file) = (serde_json::Map::new(), serde_json::Map::new());
        for (name, value) in entries {
            if !accepted.contains(&name) {
                return Err(OptionError::Unexpected { name, accepted });
            }
            // Each value alone first, so an error names the option it is about.
            let one = serde_json::Map::from_iter([(name.clone(), value.clone())]);
            let (checked, part) = match file_names.contains(&name) {
                true => (one_of::<FileOptions>(one).map(drop), &mut file),
                false => (one_of::<RuleOptions>(one).map(drop), &mut rules),
            };
            checked.map_err(|e| classify(name.clone(), e))?;
            part.insert(name, value);
        }
        let whole = |e| classify(String::new(), e);
        Ok(AuditOptions {
            rules: one_of(rules).map_err(whole)?,
            file: one_of(file).map_err(whole)?,
        })
    }
}

fn one_of<T: for<'de> Deserialize<'de>>(
    map: serde_json::Map<String, serde_json::Value>,
) -> Result<T, serde_json::Error> {
    serde_json::from_value(serde_json::Value::Object(map))
}

/// A value of the wrong type is serde's `invalid type`; anything else is a value refused.
fn classify(name: String, error: serde_json::Error) -> OptionError {
    let detail = error.to_string();
    match detail.starts_with("invalid type") {
        true => OptionError::Kind { name, detail },
        false => OptionError::Value { name, detail },
    }
}

/// Rules as `--select` takes them: one string or a list of strings, each of which may hold
/// several separated by commas.
fn rules<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    struct Rules;
    impl<'de> Visitor<'de> for Rules {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a rule code or name, or a list of them")
        }
        fn visit_str<E: de::Error>(self, item: &str) -> Result<Self::Value, E> {
            Ok(item.split(',').map(str::to_owned).collect())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<String>()? {
                out.extend(item.split(',').map(str::to_owned));
            }
            Ok(out)
        }
    }
    deserializer.deserialize_any(Rules)
}

/// `True` or `False` only: not a string or a number that reads as one.
fn strict_bool<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    struct Flag;
    impl Visitor<'_> for Flag {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("True or False")
        }
        fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Self::Value, E> {
            Ok(flag)
        }
    }
    deserializer.deserialize_any(Flag)
}

/// A path, as a string (the extension turns `os.PathLike` objects into theirs).
fn path<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<PathBuf>, D::Error> {
    struct Path;
    impl Visitor<'_> for Path {
        type Value = Option<PathBuf>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a path (str or os.PathLike)")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Some(PathBuf::from(text)))
        }
    }
    deserializer.deserialize_any(Path)
}

/// A `--fail-on` level by the name the command line takes.
fn fail_on<'de, D: Deserializer<'de>>(deserializer: D) -> Result<FailOnArg, D::Error> {
    struct Level;
    impl Visitor<'_> for Level {
        type Value = FailOnArg;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            let names: Vec<String> = FailOnArg::value_variants()
                .iter()
                .filter_map(|v| v.to_possible_value())
                .map(|v| format!("'{}'", v.get_name()))
                .collect();
            match names.split_last() {
                Some((last, rest)) => write!(f, "{} or {last}", rest.join(", ")),
                None => f.write_str("a level"),
            }
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            FailOnArg::from_str(text, false)
                .map_err(|_| E::invalid_value(Unexpected::Str(text), &self))
        }
    }
    deserializer.deserialize_any(Level)
}

/// A size as a number of bytes or a string such as `24GiB` (`--gpu-budget`'s syntax).
fn size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    struct Size;
    impl Visitor<'_> for Size {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a size in bytes (int) or a string such as '24GiB'")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<Self::Value, E> {
            Ok(Some(bytes))
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            crate::size::parse_size(text)
                .map(Some)
                .map_err(|e| E::invalid_value(Unexpected::Str(text), &e.as_str()))
        }
    }
    deserializer.deserialize_any(Size)
}

/// A whole number of at least 1.
fn positive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    struct Positive;
    impl Visitor<'_> for Positive {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a whole number of at least 1")
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
            match n {
                0 => Err(E::invalid_value(Unexpected::Unsigned(0), &self)),
                n => Ok(n),
            }
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
            Err(E::invalid_value(Unexpected::Signed(n), &self))
        }
    }
    deserializer.deserialize_any(Positive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entries(value: serde_json::Value) -> Vec<(String, serde_json::Value)> {
        value.as_object().unwrap().clone().into_iter().collect()
    }

    #[test]
    fn names_are_the_fields_and_scopes_differ() {
        let live = AuditOptions::names(Scope::Live);
        let files = AuditOptions::names(Scope::Files);
        assert!(live.contains(&"fail_on".to_owned()) && !live.contains(&"load_to".to_owned()));
        assert!(files.starts_with(&live) && files.contains(&"timeout_per_file".to_owned()));
    }

    #[test]
    fn keyword_values_fill_the_fields_the_flags_fill() {
        let options = AuditOptions::from_entries(
            Scope::Files,
            entries(json!({
                "select": ["TP1", "TP201,TP204"], "fail_on": "warning", "gpu_budget": "1KiB",
                "max_memory": 4096, "metadata_only": true, "timeout_per_file": 5,
            })),
        )
        .expect("valid");
        assert_eq!(options.rules.select, ["TP1", "TP201", "TP204"]);
        assert!(matches!(options.rules.fail_on, FailOnArg::Warning));
        assert_eq!(options.rules.gpu_budget, Some(1024));
        assert_eq!(options.rules.max_memory, Some(4096));
        assert!(options.rules.metadata_only);
        assert_eq!(options.file.timeout_per_file, 5);
        // Defaults are the flags' defaults.
        let none = AuditOptions::from_entries(Scope::Files, Vec::new()).expect("valid");
        assert_eq!(none.file.timeout_per_file, TIMEOUT_PER_FILE);
        assert!(matches!(none.rules.fail_on, FailOnArg::Error));
    }

    #[test]
    fn errors_name_the_option_and_tell_a_kind_from_a_value() {
        let err = |scope, value| AuditOptions::from_entries(scope, entries(value)).unwrap_err();
        assert!(matches!(
            err(Scope::Live, json!({"load_to": "cuda:0"})),
            OptionError::Unexpected { name, accepted } if name == "load_to" && accepted.contains(&"select".to_owned())
        ));
        assert!(matches!(
            err(Scope::Files, json!({"metadata_only": "yes"})),
            OptionError::Kind { name, .. } if name == "metadata_only"
        ));
        assert!(matches!(
            err(Scope::Files, json!({"fail_on": "sometimes"})),
            OptionError::Value { name, detail } if name == "fail_on" && detail.ends_with("expected 'error', 'warning' or 'never'")
        ));
        assert!(matches!(
            err(Scope::Files, json!({"fail_on": 3})),
            OptionError::Kind { name, .. } if name == "fail_on"
        ));
        assert!(matches!(
            err(Scope::Files, json!({"gpu_budget": "lots"})),
            OptionError::Value { name, detail } if name == "gpu_budget" && detail.contains("unknown unit 'lots'")
        ));
        assert!(matches!(
            err(Scope::Files, json!({"select": 3})),
            OptionError::Kind { name, .. } if name == "select"
        ));
        assert!(matches!(
            err(Scope::Files, json!({"config": 3})),
            OptionError::Kind { name, detail } if name == "config" && detail.ends_with("expected a path (str or os.PathLike)")
        ));
        assert!(matches!(
            err(Scope::Files, json!({"timeout_per_file": 0})),
            OptionError::Value { name, .. } if name == "timeout_per_file"
        ));
    }
}
