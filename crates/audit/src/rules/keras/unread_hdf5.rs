use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(KerasUnreadHdf5 {
    code: "TP716",
    name: "keras-legacy-not-read",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "keras"],
    summary: "An HDF5 file (a legacy Keras .h5 model or weights) is not read, so its config is not judged.",
    doc: "\
What it checks
  Files that begin with HDF5's signature: Keras' legacy full-model files
  (`model.save(\"m.h5\")`), whose config is the `model_config` attribute of the root group,
  Keras weights files (`model.save_weights(\"m.weights.h5\")`) and any other file h5py opens.

Why it matters
  A legacy `.h5` model's config names the layers `keras.saving.load_model` builds, Lambda
  layers and their marshalled bytecode included (CVE-2024-3660), as a `.keras` archive's does.
  tensorplay has no HDF5 reader (none in pure Rust is yet proven on Keras' layout), so the
  config is not judged: the file fails rather than passes unread.

Example
  model.h5, written by `model.save(\"model.h5\")`, or `model.weights.h5` by
  `model.save_weights`.

How to fix
  Save the model as a Keras v3 archive (`model.save(\"m.keras\")`), whose config tensorplay
  judges (TP711-TP714), or export the weights to safetensors. A file known to hold weights
  only can be let through by turning this rule off for it (`tensorplay.toml`).",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let Some(judged) = &ctx.keras else {
        return;
    };
    if judged.config_read {
        return;
    }
    out.push(Draft {
        message: "an HDF5 file (a legacy Keras .h5 model or weights): tensorplay reads no HDF5, \
                  so a model config it may hold (Lambda layers, named functions) is not judged"
            .into(),
        fix: "save the model as a .keras archive (model.save(\"m.keras\")), or export the \
              weights to safetensors"
            .into(),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::options::Options;
    use tensorplay_engine::{Format, KerasModel};

    #[test]
    fn an_unread_hdf5_file_fails_and_a_read_config_does_not() {
        let mut ckpt =
            tensorplay_engine::testing::checkpoint("m.h5", Format::Hdf5, Vec::new(), Vec::new());
        ckpt.keras = Some(KerasModel {
            config: None,
            keras_version: None,
            members: Vec::new(),
        });
        let report =
            crate::audit::audit(&ckpt, "m.h5", &Config::default(), &Options::default(), None);
        let codes: Vec<&str> = report.findings.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, ["TP716"]);
        assert!(super::super::tests::codes(serde_json::json!({}))
            .iter()
            .all(|c| *c != "TP716"));
    }
}
