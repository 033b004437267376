use super::report;
use crate::finding::Draft;
use crate::keras::Kind;
use crate::rule::{declare_rule, Context};

declare_rule!(KerasLambda {
    code: "TP711",
    name: "keras-lambda",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "keras"],
    summary: "A Keras model has a Lambda layer or a Python lambda (marshalled bytecode).",
    doc: "\
What it checks
  Every `Lambda` layer in a `.keras` archive's `config.json`, whatever its function, and
  every `__lambda__` object: Python bytecode, marshalled and base64-encoded into the config.

Why it matters
  Keras rebuilds a Python lambda by unmarshalling its bytecode and runs it when the model is
  called (CVE-2024-3660). `load_model(safe_mode=True)` refuses a lambda; a Lambda layer whose
  function is a named one is the way in for the other published payloads (CVE-2025-9906,
  CVE-2025-8747: `keras.models.load_model` as a Lambda's function). tensorplay fails every
  Lambda layer: its function is code, not weights.

Example
  {\"module\": \"keras.layers\", \"class_name\": \"Lambda\",
   \"config\": {\"function\": {\"class_name\": \"__lambda__\", \"config\": {\"value\": \"4wEAAAAA...\"}}}}

How to fix
  Replace the Lambda layer with a subclassed layer registered in your own code
  (`@keras.saving.register_keras_serializable()`), which the loading code must import; or
  save the weights alone (`model.save_weights`).",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    report(
        ctx,
        out,
        Kind::Lambda,
        "has a Lambda layer or a Python lambda",
        "replace the Lambda layer with a registered subclassed layer, or ship the weights alone",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::codes;
    use serde_json::json;

    #[test]
    fn a_lambda_layer_and_a_python_lambda_fail() {
        let layer = json!({"module": "keras.layers", "class_name": "Lambda",
            "config": {"name": "l", "function": {"module": "builtins", "class_name": "function",
            "config": "relu"}}});
        assert_eq!(codes(layer), ["TP711", "TP715"]);
        let lambda = json!({"class_name": "__lambda__", "config": {"value": "4wEA"}});
        assert_eq!(codes(lambda), ["TP711", "TP715"]);
        assert_eq!(codes(json!({"name": "Lambda"})), ["TP715"]);
    }
}
