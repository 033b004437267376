use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(KerasWeightsNotRead {
    code: "TP715",
    name: "keras-weights-not-read",
    severity: Info,
    reads_bytes: false,
    tags: ["keras"],
    summary: "A Keras archive's weights (model.weights.h5) are listed, not read.",
    doc: "\
What it checks
  The members of a `.keras` archive besides `config.json` and `metadata.json`: the weights
  file (`model.weights.h5`, or `.npz`) and anything else.

Why it matters
  tensorplay has no HDF5 reader: the `hdf5` crate binds libhdf5, and no pure-Rust reader is
  yet proven on Keras' layout and on hostile input, so the weights' tensors are not checked
  (no non-finite, layout or memory findings). Keras loads the weights as plain arrays (h5py,
  never pickle), so this is no safety concern: the config, which names everything Keras
  builds, is judged whole by TP711-TP714. Pickles and `.npy` object arrays in any member are
  still judged (TP501), as `np.load` would read them.

Example
  the Keras archive (saved by Keras 3.15.1) holds model.weights.h5 (18 088 bytes); its
  weights are listed, not read

How to fix
  Nothing to fix; export the weights to safetensors to have their tensors checked.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let Some(judged) = &ctx.keras else {
        return;
    };
    if judged.members.is_empty() {
        return;
    }
    let listed: Vec<String> = judged
        .members
        .iter()
        .map(|m| format!("{} ({} bytes)", m.name, m.size))
        .collect();
    let version = judged
        .keras_version
        .as_deref()
        .map(|v| format!(" (saved by Keras {v})"))
        .unwrap_or_default();
    out.push(Draft {
        message: format!(
            "the Keras archive{version} holds {}; its weights are listed, not read",
            listed.join(", ")
        ),
        fix: "nothing to fix; export the weights to safetensors to have their tensors checked"
            .into(),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use super::super::tests::audit_config;
    use serde_json::json;

    #[test]
    fn the_weights_are_listed_as_not_read() {
        let report = audit_config(json!({}));
        let f = report
            .findings
            .iter()
            .find(|f| f.code.as_str() == "TP715")
            .unwrap();
        assert!(
            f.message.contains("model.weights.h5 (10000 bytes)"),
            "{}",
            f.message
        );
        assert!(f.message.contains("Keras 3.15.1"), "{}", f.message);
    }
}
