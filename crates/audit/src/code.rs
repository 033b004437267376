//! A rule's identity as findings and reports carry it: its code and its name, together, so
//! nothing downstream looks a rule up by a string again.

use crate::registry;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A rule's stable code (`TP101`) with its name (`view-overlap`). Only [`declare_rule!`]
/// makes one, so every `Code` names a rule that exists. Serialised as the code string.
///
/// [`declare_rule!`]: crate::rule
#[derive(Debug, Clone, Copy)]
pub struct Code {
    code: &'static str,
    name: &'static str,
}

impl Code {
    /// Declared once per rule by `declare_rule!`.
    pub(crate) const fn new(code: &'static str, name: &'static str) -> Code {
        Code { code, name }
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
        registry::by_code(&text)
            .map(|r| r.code())
            .ok_or_else(|| D::Error::custom(format!("unknown rule code '{text}'")))
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
