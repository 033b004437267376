use super::report;
use crate::finding::Draft;
use crate::keras::Kind;
use crate::rule::{declare_rule, Context};

declare_rule!(KerasForeignFunction {
    code: "TP713",
    name: "keras-foreign-function",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "keras"],
    summary: "A Keras model names a function outside Keras' built-in modeling functions.",
    doc: "\
What it checks
  Every function a `.keras` archive's `config.json` names (`\"class_name\": \"function\"`):
  only Keras' own activations, losses, metrics and the like pass (a table generated from the
  pinned Keras, scripts/keras-allowlist.py).

Why it matters
  A function named in the config is looked up by module and name and called when the model
  runs or trains. The published payloads name `builtins.exec`, `os.system` or
  `subprocess.Popen` (CVE-2025-1550); Keras' `get`, `serialize` and `deserialize` helpers
  would read a config of their own, and `keras.ops` is reached only from code.

Example
  {\"module\": \"os\", \"class_name\": \"function\", \"config\": \"system\"}

How to fix
  Use Keras' built-in functions by name (`\"activation\": \"relu\"`), or ship the weights
  alone.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    report(
        ctx,
        out,
        Kind::Function,
        "names functions outside Keras' modeling functions",
        "use Keras' built-in functions, or ship the weights alone",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::codes;
    use serde_json::json;

    #[test]
    fn a_function_outside_keras_fails() {
        let system = json!({"module": "os", "class_name": "function", "config": "system"});
        assert_eq!(codes(system), ["TP713", "TP715"]);
        let relu = json!({"module": "builtins", "class_name": "function", "config": "relu"});
        assert_eq!(codes(relu), ["TP715"]);
    }
}
