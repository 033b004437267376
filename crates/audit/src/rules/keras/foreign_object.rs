use super::report;
use crate::finding::Draft;
use crate::keras::Kind;
use crate::rule::{declare_rule, Context};

declare_rule!(KerasForeignObject {
    code: "TP712",
    name: "keras-foreign-object",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "keras"],
    summary: "A Keras model names a class outside Keras' own serializable classes.",
    doc: "\
What it checks
  Every object in a `.keras` archive's `config.json` (`module`, `class_name`,
  `registered_name`) against the classes `keras.saving.load_model` resolves to Keras' own
  serializable classes, a table generated from the pinned Keras (scripts/keras-allowlist.py).
  An object naming no module, a custom `registered_name`, a TensorFlow type spec or a
  `TFSMLayer` (which loads a SavedModel from a path in the config) fails too.

Why it matters
  Keras before 3.9 imported whatever module the config named and called the class or
  function it found there (CVE-2025-1550): `os.system` from a config. Keras now refuses
  names outside its own packages, but any custom object must come from code the loader
  imports, which the file does not carry: it cannot be judged, so it fails.

Example
  {\"module\": \"collections\", \"class_name\": \"OrderedDict\", \"config\": {}}
  {\"module\": null, \"class_name\": \"MyLayer\", \"registered_name\": \"my_package>MyLayer\"}

How to fix
  Save the model with Keras' own layers, or ship the weights alone and build the model in
  code; a model with custom layers is audited together with the code that defines them.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    report(
        ctx,
        out,
        Kind::Foreign,
        "names objects outside Keras' serializable classes",
        "build the model from Keras' own layers, or ship the weights alone",
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::codes;
    use serde_json::json;

    #[test]
    fn a_class_outside_keras_fails() {
        let foreign = json!({"module": "collections", "class_name": "OrderedDict", "config": {}});
        assert_eq!(codes(foreign), ["TP712", "TP715"]);
        let dense = json!({"module": "keras.layers", "class_name": "Dense", "config": {}});
        assert_eq!(codes(dense), ["TP715"]);
    }
}
