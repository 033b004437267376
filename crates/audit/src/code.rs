//! A rule's identity as findings and reports carry it: its code and its name, together, so
//! nothing downstream looks a rule up by a string again. The set of codes is closed and lives
//! here, a leaf: configuration, options, errors and suggestions name rules without the
//! registry, which only maps codes to the rules that check them.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A rule's stable code (`TP101`) with its name (`view-overlap`): one of [`Code::ALL`].
/// Serialised as the code string.
#[derive(Debug, Clone, Copy)]
pub struct Code {
    code: &'static str,
    name: &'static str,
    /// Whether configuration may change its severity or turn it off.
    configurable: bool,
}

/// Every code, in order; `declare_rule!` takes its rule's code from here (a code or name not
/// listed, or listed with another name, fails to compile) and the registry has one rule each.
const ALL: &[Code] = &[
    Code::listed("TP101", "view-overlap"),
    Code::listed("TP102", "grad-view"),
    Code::listed("TP103", "tied-alias"),
    Code::listed("TP104", "storage-bloat"),
    Code::listed("TP105", "non-contiguous"),
    Code::listed("TP106", "shared-storage"),
    Code::listed("TP107", "view-out-of-bounds"),
    Code::listed("TP201", "mixed-devices"),
    Code::listed("TP202", "unexpected-device"),
    Code::listed("TP203", "device-mismatch"),
    Code::listed("TP204", "meta-tensor"),
    Code::listed("TP301", "fragmentation-score"),
    Code::listed("TP302", "allocator-overhead"),
    Code::listed("TP303", "memory-budget"),
    Code::listed("TP401", "non-finite"),
    Code::listed("TP501", "unsafe-global"),
    Code::listed("TP502", "corrupt-file").fixed(),
    Code::listed("TP503", "index-mismatch").fixed(),
    Code::listed("TP504", "torchscript-code"),
    Code::listed("TP505", "weights-only-load"),
    Code::listed("TP506", "over-budget").fixed(),
    Code::listed("TP601", "layout-mismatch"),
    Code::listed("TP701", "template-sandbox-escape"),
    Code::listed("TP702", "template-loads-template"),
    Code::listed("TP703", "template-mutation"),
    Code::listed("TP704", "template-unparsable"),
    Code::listed("TP705", "template-unusual"),
    Code::listed("TP706", "template-changed"),
    Code::listed("TP711", "keras-lambda"),
    Code::listed("TP712", "keras-foreign-object"),
    Code::listed("TP713", "keras-foreign-function"),
    Code::listed("TP714", "keras-unsafe-deserialization"),
    Code::listed("TP715", "keras-weights-not-read"),
    Code::listed("TP716", "keras-legacy-not-read"),
    Code::listed("TP801", "unsigned-model"),
    Code::listed("TP802", "invalid-signature"),
    Code::listed("TP803", "untrusted-signer"),
    Code::listed("TP804", "manifest-mismatch"),
    Code::listed("TP805", "signature-verified"),
];

impl Code {
    /// Every code, in order.
    pub const ALL: &'static [Code] = ALL;

    const fn listed(code: &'static str, name: &'static str) -> Code {
        Code {
            code,
            name,
            configurable: true,
        }
    }

    /// A rule configuration cannot change: an unreadable or inconsistent input always fails.
    const fn fixed(self) -> Code {
        Code {
            configurable: false,
            ..self
        }
    }

    /// Whether `tensorplay.toml` may change the rule's severity or turn it off.
    pub fn configurable(self) -> bool {
        self.configurable
    }

    /// The listed code `code` (whose name must be `name`), at compile time in `declare_rule!`.
    pub(crate) const fn declared(code: &str, name: &str) -> Code {
        let mut i = 0;
        while i < ALL.len() {
            let listed = ALL[i];
            if same(listed.code, code) {
                assert!(
                    same(listed.name, name),
                    "a rule's name differs from its code's"
                );
                return listed;
            }
            i += 1;
        }
        panic!("a rule's code is not listed in Code::ALL")
    }

    /// The code written exactly so (`TP101`), as reports write it.
    pub fn parse(code: &str) -> Option<Code> {
        ALL.iter().copied().find(|c| c.code == code)
    }

    /// The code a user means by a code (any case) or a name.
    pub fn find(code_or_name: &str) -> Option<Code> {
        ALL.iter()
            .copied()
            .find(|c| c.code.eq_ignore_ascii_case(code_or_name) || c.name == code_or_name)
    }

    /// The codes a selection (`--select`, `--ignore`, Python's `select=`) names, as ruff
    /// reads its own: a code (any case, `TP101`), a code prefix of `TP` and at least one digit
    /// (`TP1`, `tp50`: every code it begins) or a rule name (`unsafe-global`). Empty when it
    /// names none; `suggest::unknown_rule` says what it may have meant.
    pub fn select(selector: &str) -> Vec<Code> {
        if let Some(code) = Code::find(selector) {
            return vec![code];
        }
        let prefix = selector.to_ascii_uppercase();
        let digits = prefix.strip_prefix("TP").unwrap_or("");
        // "TP" alone would select everything: no selection at all says that already.
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Vec::new();
        }
        ALL.iter()
            .copied()
            .filter(|c| c.code.starts_with(&prefix))
            .collect()
    }

    /// `TP101`.
    pub fn as_str(self) -> &'static str {
        self.code
    }

    /// `view-overlap`.
    pub fn name(self) -> &'static str {
        self.name
    }
}

impl PartialEq for Code {
    fn eq(&self, other: &Code) -> bool {
        self.code == other.code
    }
}

impl Eq for Code {}

/// `a == b` where a const fn needs it.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl std::hash::Hash for Code {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.code.hash(state);
    }
}

impl PartialOrd for Code {
    fn partial_cmp(&self, other: &Code) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Code {
    fn cmp(&self, other: &Code) -> std::cmp::Ordering {
        self.code.cmp(other.code)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code)
    }
}

/// For tests only: the crate itself compares codes, never strings.
#[cfg(test)]
impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.code == *other
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code)
    }
}

/// A report read back names rules by code; one this build does not know is an error, not a
/// finding silently dropped.
impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Code, D::Error> {
        let text = String::deserialize(d)?;
        Code::parse(&text).ok_or_else(|| D::Error::custom(format!("unknown rule code '{text}'")))
    }
}

/// A finding carries its rule as two JSON keys, `"code"` and `"rule"` (the name), through
/// `#[serde(flatten, with = "crate::code::code_and_name")]`.
pub(crate) mod code_and_name {
    use super::Code;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Tagged {
        code: Code,
        rule: String,
    }

    pub fn serialize<S: Serializer>(code: &Code, s: S) -> Result<S::Ok, S::Error> {
        Tagged {
            code: *code,
            rule: code.name.to_owned(),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Code, D::Error> {
        let tagged = Tagged::deserialize(d)?;
        if tagged.rule != tagged.code.name {
            return Err(D::Error::custom(format!(
                "rule '{}' does not have code {}",
                tagged.rule, tagged.code
            )));
        }
        Ok(tagged.code)
    }
}

#[cfg(test)]
mod tests {
    use crate::registry::RULES;
    use crate::Code;

    #[test]
    fn selections_take_a_code_a_prefix_or_a_name() {
        let codes = |selector: &str| -> Vec<&str> {
            Code::select(selector).iter().map(|c| c.as_str()).collect()
        };
        assert_eq!(codes("TP501"), ["TP501"]);
        assert_eq!(codes("tp501"), ["TP501"]);
        assert_eq!(codes("unsafe-global"), ["TP501"]);
        assert_eq!(
            codes("TP1"),
            ["TP101", "TP102", "TP103", "TP104", "TP105", "TP106", "TP107"]
        );
        assert_eq!(
            codes("tp50"),
            ["TP501", "TP502", "TP503", "TP504", "TP505", "TP506"]
        );
        assert_eq!(codes("TP2"), ["TP201", "TP202", "TP203", "TP204"]);
        // A prefix must be TP and digits, and begin some code.
        for none in [
            "TP",
            "T",
            "",
            "TP1x",
            "TP9",
            "TP109",
            "TP1010",
            "unsafe",
            "UNSAFE-GLOBAL",
        ] {
            assert!(
                codes(none).is_empty(),
                "{none:?} selected {:?}",
                codes(none)
            );
        }
    }

    #[test]
    fn codes_serialise_as_their_string_and_read_back_only_when_known() {
        for rule in RULES {
            let code = rule.code();
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: Code = serde_json::from_str(&json).unwrap();
            assert_eq!((back, back.name()), (code, rule.name()));
        }
        let err = serde_json::from_str::<Code>("\"TP999\"").unwrap_err();
        assert!(
            err.to_string().contains("unknown rule code 'TP999'"),
            "{err}"
        );
    }
}
