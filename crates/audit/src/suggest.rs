//! "did you mean": the rule closest to a name that is none, for every place a user names one
//! (`--select`, `--ignore`, `explain`, `tensorplay.toml`).

use crate::Code;

/// `unknown rule 'TP109' (did you mean TP101 view-overlap?)`, or a pointer to the list when
/// nothing is close.
pub fn unknown_rule(name: &str) -> String {
    match closest(name) {
        Some(code) => format!(
            "unknown rule '{name}' (did you mean {code} {}?)",
            code.name()
        ),
        None => format!("unknown rule '{name}' (see `tensorplay rules`)"),
    }
}

/// The rule whose code or name is fewest edits away, within a third of the name's length
/// (at least one edit), so a typo is caught and an unrelated word is not; ties go to the
/// first in code order.
pub fn closest(name: &str) -> Option<Code> {
    let wanted = name.to_ascii_lowercase();
    let limit = (wanted.chars().count() / 3).max(1);
    Code::ALL
        .iter()
        .copied()
        .map(|rule| {
            let code = strsim::levenshtein(&wanted, &rule.as_str().to_ascii_lowercase());
            let by_name = strsim::levenshtein(&wanted, rule.name());
            (code.min(by_name), rule)
        })
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, rule)| rule)
}

#[cfg(test)]
mod tests {
    use super::unknown_rule;

    #[test]
    fn typos_get_a_suggestion() {
        assert_eq!(
            unknown_rule("TP109"),
            "unknown rule 'TP109' (did you mean TP101 view-overlap?)"
        );
        assert_eq!(
            unknown_rule("view-overlp"),
            "unknown rule 'view-overlp' (did you mean TP101 view-overlap?)"
        );
        assert_eq!(
            unknown_rule("mixed-device"),
            "unknown rule 'mixed-device' (did you mean TP201 mixed-devices?)"
        );
        assert_eq!(
            unknown_rule("tp5011"),
            "unknown rule 'tp5011' (did you mean TP501 unsafe-global?)"
        );
    }

    #[test]
    fn unrelated_words_get_the_list() {
        for name in ["TP999", "nope", "fail_fast"] {
            assert_eq!(
                unknown_rule(name),
                format!("unknown rule '{name}' (see `tensorplay rules`)")
            );
        }
    }
}
