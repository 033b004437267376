use super::report;
use crate::finding::Draft;
use crate::keras::Kind;
use crate::rule::{declare_rule, Context};

declare_rule!(KerasUnsafeDeserialization {
    code: "TP714",
    name: "keras-unsafe-deserialization",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "keras"],
    summary:
        "A Keras model calls enable_unsafe_deserialization, load_model or another non-modeling API.",
    doc: "\
What it checks
  Every name in a `.keras` archive's `config.json` of the APIs Keras refuses as
  non-modeling (`NON_MODELING_APIS`: `keras.config.enable_unsafe_deserialization`,
  `keras.models.load_model`, `keras.utils.get_file`…), under any Keras module, and any
  string that mentions `enable_unsafe_deserialization`.

Why it matters
  A config that calls `enable_unsafe_deserialization` before a Lambda layer turns safe mode
  off while the model loads (GHSA-36fq-jgmw-4r9c); one whose Lambda calls `load_model`
  loads a second model with `safe_mode=False` (CVE-2025-9906, CVE-2025-8747); `get_file`
  downloads. No model is built from them.

Example
  {\"module\": \"keras.config\", \"class_name\": \"function\",
   \"config\": \"enable_unsafe_deserialization\"}

How to fix
  Do not load the file. A model saved by Keras never names these.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    report(
        ctx,
        out,
        Kind::NonModeling,
        "names APIs Keras refuses as non-modeling",
        "do not load the file: no model saved by Keras names these",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::codes;
    use serde_json::json;

    #[test]
    fn the_unsafe_switch_fails() {
        let switch = json!({"module": "keras.config", "class_name": "function",
            "config": "enable_unsafe_deserialization"});
        assert_eq!(codes(switch), ["TP714", "TP715"]);
    }
}
