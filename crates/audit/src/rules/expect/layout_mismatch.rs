use crate::diff::dims;
use crate::finding::Draft;
use crate::manifest::{Manifest, TensorEntry};
use crate::options::Options;
use crate::rule::{declare_rule, Context};

declare_rule!(LayoutMismatch {
    code: "TP601",
    name: "layout-mismatch",
    severity: Error,
    reads_bytes: false,
    tags: ["layout"],
    summary: "The checkpoint does not fit the layout given with `--expect`.",
    doc: "\
What it checks
  With `--expect LAYOUT`, where LAYOUT is a file written by
  `tensorplay inspect --format layout` (names, dtypes, shapes, devices) or another
  checkpoint, every tensor the layout names must be in the checkpoint with the same shape
  and dtype, on the same device (the device of its storage, where its bytes will be), and
  the checkpoint must hold no tensor the layout does not name. That is
  `load_state_dict(strict=True)` plus the device check, before anything is loaded.

Why it matters
  A checkpoint that no longer fits its model fails at load time in production, or worse,
  loads with `strict=False` and serves half-initialised weights. A renamed layer, a resized
  vocabulary or a buffer saved from `cuda:1` is cheaper to find in the pull request.

Example
  tensorplay inspect --format layout model.safetensors > layout.json   # once, from a good model
  tensorplay audit --expect layout.json model.safetensors              # in CI

How to fix
  Re-export the checkpoint from the model it is for (`model.state_dict()`, moved to the
  expected device first), or, if the model changed on purpose, write the layout again.",
    check: check,
    applies: applies,
});

/// Without a layout there is nothing to compare.
fn applies(options: &Options) -> bool {
    options.expect.is_some()
}

/// At most this many names are written into a message; the finding lists them all.
const NAMES_IN_MESSAGE: usize = 5;

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let Some(expected) = ctx.expect else {
        return;
    };
    let actual = Manifest::of(ctx.ckpt);
    let (want, have) = (expected.by_name(), actual.by_name());
    let source = if expected.source.is_empty() {
        "the expected layout".to_owned()
    } else {
        format!("the layout of {}", expected.source)
    };
    let missing: Vec<String> = expected
        .tensors
        .iter()
        .filter(|t| !have.contains_key(t.name.as_str()))
        .map(|t| t.name.clone())
        .collect();
    if !missing.is_empty() {
        out.push(Draft {
            message: format!(
                "{} that {source} expects {} missing: {}",
                crate::text::plural(missing.len(), "tensor"),
                if missing.len() == 1 { "is" } else { "are" },
                some(&missing)
            ),
            tensors: missing,
            storage: None,
            fix: "re-export the checkpoint from the model it is for, or write the layout again if the model changed on purpose".into(),
            ..Default::default()
        });
    }
    let unexpected: Vec<String> = actual
        .tensors
        .iter()
        .filter(|t| !want.contains_key(t.name.as_str()))
        .map(|t| t.name.clone())
        .collect();
    if !unexpected.is_empty() {
        out.push(Draft {
            message: format!(
                "{} not in {source}: {}",
                crate::text::plural(unexpected.len(), "tensor"),
                some(&unexpected)
            ),
            tensors: unexpected,
            storage: None,
            fix: "save only the model's state_dict, or write the layout again if the model changed on purpose".into(),
            ..Default::default()
        });
    }
    for t in &actual.tensors {
        let Some(w) = want.get(t.name.as_str()) else {
            continue;
        };
        let differences = differences(w, t);
        if differences.is_empty() {
            continue;
        }
        let storage = ctx.ckpt.tensor(&t.name).map(|x| x.storage_index());
        out.push(Draft {
            tensors: vec![t.name.clone()],
            storage,
            message: format!("'{}': {}", t.name, differences.join("; ")),
            fix: "re-export the tensor from the model it is for (load to CPU, then move the model to its device before saving)".into(),
            ..Default::default()
        });
    }
}

/// What differs between the expected entry and the checkpoint's, as `field X, expected Y`.
fn differences(want: &TensorEntry, have: &TensorEntry) -> Vec<String> {
    let mut out = Vec::new();
    if want.shape != have.shape {
        out.push(format!(
            "shape {}, expected {}",
            dims(&have.shape),
            dims(&want.shape)
        ));
    }
    if want.dtype != have.dtype {
        out.push(format!("dtype {}, expected {}", have.dtype, want.dtype));
    }
    if want.device != have.device {
        out.push(format!("on {}, expected {}", have.device, want.device));
    }
    out
}

fn some(names: &[String]) -> String {
    let shown: Vec<&str> = names
        .iter()
        .take(NAMES_IN_MESSAGE)
        .map(String::as_str)
        .collect();
    match names.len().saturating_sub(NAMES_IN_MESSAGE) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use crate::audit::audit;
    use crate::config::Config;
    use crate::manifest::Manifest;
    use crate::options::Options;
    use crate::testing::{checkpoint, storage, tensor};
    use std::sync::Arc;
    use tensorplay_engine::Device;

    #[test]
    fn missing_unexpected_reshaped_and_moved_tensors_are_each_reported() {
        let s0 = storage(0, 6, "cpu");
        let s1 = storage(1, 4, "cpu");
        let s2 = storage(2, 2, "cpu");
        let model = checkpoint(
            vec![
                tensor("a", &s0, &[2, 3], &[3, 1], 0, Device::Cpu),
                tensor("b", &s1, &[4], &[1], 0, Device::Cpu),
                tensor("c", &s2, &[2], &[1], 0, Device::Cpu),
            ],
            vec![s0, s1, s2],
        );
        let mut layout = Manifest::of(&model);
        layout.tensors[0].shape = vec![3, 2];
        layout.tensors[1].device = "cuda:0".into();
        layout.tensors.remove(2);
        layout.tensors.push(Manifest::of(&model).tensors[2].clone());
        layout.tensors[2].name = "d".into();
        let options = Options {
            expect: Some(Arc::new(layout)),
            ..Default::default()
        };
        let report = audit(&model, "hand-made.pt", &Config::default(), &options, None);
        let found: Vec<(String, Vec<String>)> = report
            .findings
            .iter()
            .filter(|f| f.code == super::LayoutMismatch::CODE)
            .map(|f| (f.message.clone(), f.tensors.clone()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "1 tensor that the layout of hand-made.pt expects is missing: d".to_owned(),
                    vec!["d".to_owned()]
                ),
                (
                    "1 tensor not in the layout of hand-made.pt: c".to_owned(),
                    vec!["c".to_owned()]
                ),
                (
                    "'a': shape [2, 3], expected [3, 2]".to_owned(),
                    vec!["a".to_owned()]
                ),
                (
                    "'b': on cpu, expected cuda:0".to_owned(),
                    vec!["b".to_owned()]
                ),
            ]
        );
        // The checkpoint against its own layout: nothing to report.
        let same = Options {
            expect: Some(Arc::new(Manifest::of(&model))),
            ..Default::default()
        };
        let report = audit(&model, "hand-made.pt", &Config::default(), &same, None);
        assert!(report.checked.contains(&super::LayoutMismatch::CODE));
        assert!(!report
            .findings
            .iter()
            .any(|f| f.code == super::LayoutMismatch::CODE));
        // Without --expect the rule does not run.
        let report = audit(
            &model,
            "hand-made.pt",
            &Config::default(),
            &Options::default(),
            None,
        );
        assert!(!report.checked.contains(&super::LayoutMismatch::CODE));
    }
}
