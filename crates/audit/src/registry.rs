//! Every rule, listed once.

use crate::rule::Rule;
use crate::rules::{
    device, expect, integrity, keras, memory, numeric, provenance, safety, template, view,
};

/// All rules, in code order.
pub static RULES: &[&dyn Rule] = &[
    &view::ViewOverlap,
    &view::GradView,
    &view::TiedAlias,
    &view::StorageBloat,
    &view::NonContiguous,
    &view::SharedStorage,
    &view::ViewOutOfBounds,
    &device::MixedDevices,
    &device::UnexpectedDevice,
    &device::DeviceMismatch,
    &device::MetaTensor,
    &memory::FragmentationScore,
    &memory::AllocatorOverhead,
    &memory::MemoryBudget,
    &numeric::NonFiniteValues,
    &safety::UnsafeGlobalRule,
    &integrity::CorruptFile,
    &integrity::IndexMismatch,
    &safety::TorchscriptCode,
    &safety::WeightsOnlyLoad,
    &integrity::OverBudget,
    &expect::LayoutMismatch,
    &template::TemplateSandboxEscape,
    &template::TemplateLoadsTemplate,
    &template::TemplateMutation,
    &template::TemplateUnparsable,
    &template::TemplateUnusual,
    &template::TemplateChanged,
    &keras::KerasLambda,
    &keras::KerasForeignObject,
    &keras::KerasForeignFunction,
    &keras::KerasUnsafeDeserialization,
    &keras::KerasWeightsNotRead,
    &keras::KerasUnreadHdf5,
    &provenance::Unsigned,
    &provenance::InvalidSignature,
    &provenance::UntrustedSigner,
    &provenance::ManifestMismatch,
    &provenance::SignatureVerified,
];

/// The rule with this code (any case) or name.
pub fn find(code_or_name: &str) -> Option<&'static dyn Rule> {
    RULES
        .iter()
        .copied()
        .find(|r| r.code().as_str().eq_ignore_ascii_case(code_or_name) || r.name() == code_or_name)
}

/// The rule with exactly this code, as reports write it.
pub fn by_code(code: &str) -> Option<&'static dyn Rule> {
    RULES.iter().copied().find(|r| r.code().as_str() == code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_and_names_are_unique_and_round_trip() {
        let mut codes = HashSet::new();
        let mut names = HashSet::new();
        for rule in RULES {
            assert!(codes.insert(rule.code()), "duplicate code {}", rule.code());
            assert_eq!(
                by_code(rule.code().as_str()).map(|r| r.code()),
                Some(rule.code())
            );
            assert!(names.insert(rule.name()), "duplicate name {}", rule.name());
            assert_eq!(
                find(rule.code().as_str()).map(|r| r.code()),
                Some(rule.code())
            );
            assert_eq!(
                find(&rule.code().as_str().to_lowercase()).map(|r| r.code()),
                Some(rule.code())
            );
            assert_eq!(find(rule.name()).map(|r| r.code()), Some(rule.code()));
        }
        assert!(find("TP999").is_none());
        assert!(find("").is_none());
    }

    #[test]
    fn codes_follow_the_family_scheme_and_are_sorted() {
        let codes: Vec<&str> = RULES.iter().map(|r| r.code().as_str()).collect();
        // One rule per listed code, in the list's order.
        let listed: Vec<&str> = crate::Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(codes, listed);
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        assert_eq!(codes, sorted);
        assert_eq!(
            codes,
            [
                "TP101", "TP102", "TP103", "TP104", "TP105", "TP106", "TP107", "TP201", "TP202",
                "TP203", "TP204", "TP301", "TP302", "TP303", "TP401", "TP501", "TP502", "TP503",
                "TP504", "TP505", "TP506", "TP601", "TP701", "TP702", "TP703", "TP704", "TP705",
                "TP706", "TP711", "TP712", "TP713", "TP714", "TP715", "TP716", "TP801", "TP802",
                "TP803", "TP804", "TP805"
            ]
        );
        for rule in RULES {
            assert!(
                rule.name()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-'),
                "{} is not kebab-case",
                rule.name()
            );
        }
    }

    #[test]
    fn every_rule_is_documented_in_four_sections() {
        for rule in RULES {
            let doc = rule.doc();
            for section in ["What it checks", "Why it matters", "Example", "How to fix"] {
                assert!(doc.contains(section), "{} lacks '{section}'", rule.code());
            }
            assert!(rule.summary().ends_with('.'), "{}", rule.code());
        }
        assert!(find("TP401").is_some_and(|r| r.reads_bytes()));
        assert_eq!(RULES.iter().filter(|r| r.reads_bytes()).count(), 1);
    }
}
