use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::Severity;
use std::collections::HashMap;
use tensorplay_engine::numeric::{scaled_blocks, BlockScales, NonFinite};
use tensorplay_engine::{Checkpoint, Format, Tensor};

declare_rule!(NonFiniteValues {
    code: "TP401",
    name: "non-finite",
    severity: Error,
    reads_bytes: true,
    tags: ["numeric", "correctness"],
    summary: "NaN or ±Inf in a floating tensor (all float dtypes incl. bf16, f16, float8).",
    doc: "\
What it checks
  Every element of every floating tensor (float64/32/16, bfloat16, the float8 variants,
  complex parts) for NaN and ±Inf, from the raw bits: a value is non-finite when its
  exponent bits are all ones, or per each float8 format's own NaN encoding. Reports the
  counts and the first index. A GGUF tensor of quantised blocks (little-endian Q4_0, Q4_1,
  Q5_0, Q5_1, Q8_0, Q2_K … Q6_K) has its blocks' float16 scales (`d`, and `m`/`dmin` where
  the type has one) checked instead: the counts are of scales, the first index a block's.
  Reads every byte; `--metadata-only` skips it.

Why it matters
  A checkpoint saved after training diverged loads without complaint and produces NaN
  everywhere: the failure shows up in production, not at load time.

Example
  A fp16 run whose loss scale overflowed: 'decoder.4.weight' holds 12 NaN.

How to fix
  Find the step that diverged (lower the learning rate, fix loss scaling, clip gradients)
  and re-save from the last healthy checkpoint.

Lightning checkpoints
  Lightning's callbacks keep ±Inf as the score to beat until a monitored value exists:
  every `.ckpt` a default `ModelCheckpoint` writes holds `kth_value = inf`. A tensor under
  the top-level `callbacks` key of a torch.save checkpoint whose weights are under
  `state_dict` (the layout Lightning writes) that holds ±Inf and no NaN is reported at
  info, whatever the configured level. NaN there, and anything in the weights, stays at
  the rule's level.

scikit-learn estimators
  Some fitted attributes hold +Inf by their estimator's definition: OPTICS's
  `reachability_` (the first point of the ordering, and any never reached) and
  `core_distances_` (a point that is never a core point). Such an attribute, in a joblib
  file or pickle that names its estimator's class, holding ±Inf and no NaN, is reported at
  info, whatever the configured level.",
    check: check,
    at_most: at_most,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let Some(scans) = &ctx.scans else { return };
    // GGUF's quantised blocks: their scans count float16 scales, not elements.
    let scaled: HashMap<usize, BlockScales> = scaled_blocks(ctx.ckpt).into_iter().collect();
    for (index, t) in ctx.ckpt.tensors.iter().enumerate() {
        let Some(found) = scans.get(&index) else {
            continue;
        };
        if found.is_clean() {
            continue;
        }
        if let Some(scales) = scaled.get(&index) {
            out.push(scale_draft(t, scales, found));
            continue;
        }
        let numel = t.tensor_impl().layout().numel();
        if let Some((estimator, why)) = sklearn_infinite(ctx.ckpt, t.name(), found) {
            let what = format!("{estimator}'s fitted attribute, +Inf by definition ({why})");
            out.push(by_design(
                t,
                found,
                &what,
                "the estimator defines the attribute so",
            ));
            continue;
        }
        if let Some(callback) = lightning_placeholder(ctx.ckpt, t.name(), found) {
            let what = format!("Lightning callback state ({callback}), where ±Inf is the placeholder score kept until a monitored value beats it");
            let fix = "the callback replaces the placeholder once it monitors a value";
            out.push(by_design(t, found, &what, fix));
            continue;
        }
        out.push(Draft {
            tensors: vec![t.name().to_owned()],
            storage: Some(t.storage_index()),
            message: format!(
                "'{}' ({}) holds {} NaN, {} +Inf, {} -Inf among {numel} elements; first at index {}",
                t.name(),
                t.tensor_impl().dtype(),
                found.nan,
                found.pos_inf,
                found.neg_inf,
                found.first.map_or("?".to_owned(), |i| i.to_string())
            ),
            fix: "find the step that diverged and re-save from the last healthy checkpoint".into(),
            ..Default::default()
        });
    }
}

/// A finding on ±Inf that `what` holds by design, not as a weight: nothing to fix, as `why`.
fn by_design(t: &Tensor, found: &NonFinite, what: &str, why: &str) -> Draft {
    Draft {
        tensors: vec![t.name().to_owned()],
        storage: Some(t.storage_index()),
        message: format!(
            "'{}' holds {} +Inf, {} -Inf among {} elements: {what}; not a weight",
            t.name(),
            found.pos_inf,
            found.neg_inf,
            t.tensor_impl().layout().numel(),
        ),
        fix: format!("nothing to fix: {why}"),
        ..Default::default()
    }
}

/// A finding on the float16 scales of a tensor of quantised blocks: as many scales as its
/// blocks times the scales of one, the first named by its block.
fn scale_draft(t: &Tensor, scales: &BlockScales, found: &NonFinite) -> Draft {
    let bytes = t.tensor_impl().nbytes().unwrap_or(0);
    let blocks = bytes / (scales.block_bytes.max(1) as u64);
    let count = blocks.saturating_mul(scales.scales.len() as u64);
    let names: Vec<&str> = scales.scales.iter().map(|&(name, _)| name).collect();
    Draft {
        tensors: vec![t.name().to_owned()],
        storage: Some(t.storage_index()),
        message: format!(
            "'{}' ({} blocks) holds {} NaN, {} +Inf, {} -Inf among its {count} float16 block scales ({}); first in block {}: every value of such a block dequantises to NaN or ±Inf",
            t.name(),
            scales.ggml,
            found.nan,
            found.pos_inf,
            found.neg_inf,
            names.join(", "),
            found.first.map_or("?".to_owned(), |i| i.to_string())
        ),
        fix: "re-quantise from a healthy float checkpoint".into(),
        ..Default::default()
    }
}

/// Lightning placeholders and scikit-learn's infinite attributes are info, whatever TP401's
/// configured level.
fn at_most(ctx: &Context<'_>, draft: &Draft) -> Option<Severity> {
    let scans = ctx.scans.as_ref()?;
    let [name] = draft.tensors.as_slice() else {
        return None;
    };
    // Every tensor of that name must be a placeholder: a duplicate name is no way around it.
    let mut of_name = ctx
        .ckpt
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.name() == name)
        .peekable();
    of_name.peek()?;
    of_name
        .all(|(i, t)| {
            scans.get(&i).is_some_and(|found| {
                lightning_placeholder(ctx.ckpt, t.name(), found).is_some()
                    || sklearn_infinite(ctx.ckpt, t.name(), found).is_some()
            })
        })
        .then_some(Severity::Info)
}

/// scikit-learn's fitted attributes that hold +Inf by definition: the estimator class (as its
/// pickle names it), the attribute, and where its documentation says so.
const SKLEARN_INFINITE: [(&str, &str, &str, &str); 2] = [
    (
        "sklearn.cluster._optics",
        "OPTICS",
        "reachability_",
        "the first point of the ordering, and any never reached",
    ),
    (
        "sklearn.cluster._optics",
        "OPTICS",
        "core_distances_",
        "a point that is never a core point",
    ),
];

/// The estimator and the reason, when `name` is one of [`SKLEARN_INFINITE`]'s attributes (at
/// the root or under an enclosing estimator's path) in a pickle naming its class, holding
/// ±Inf and no NaN.
fn sklearn_infinite(
    ckpt: &Checkpoint,
    name: &str,
    found: &NonFinite,
) -> Option<(&'static str, &'static str)> {
    if found.nan > 0 || !matches!(ckpt.format, Format::Joblib | Format::Pickle) {
        return None;
    }
    let attribute = name.rsplit('.').next()?;
    SKLEARN_INFINITE
        .iter()
        .find(|(module, class, attr, _)| {
            *attr == attribute
                && ckpt
                    .unsafe_globals
                    .iter()
                    .any(|g| g.module == *module && g.name == *class)
        })
        .map(|(_, class, _, why)| (*class, *why))
}

/// The callback whose state holds `name`, when `name` is a Lightning callback's ±Inf
/// placeholder. The reader names tensors by their path in the pickled object, so
/// Lightning's `{"state_dict": …, "callbacks": {"ModelCheckpoint{…}": {"kth_value": inf}}}`
/// gives `state_dict.<param>` and `callbacks.ModelCheckpoint{…}.kth_value`; a checkpoint
/// is taken for Lightning's when it has both. NaN is never a placeholder.
fn lightning_placeholder<'n>(
    ckpt: &Checkpoint,
    name: &'n str,
    found: &NonFinite,
) -> Option<&'n str> {
    if found.nan > 0 || !matches!(ckpt.format, Format::PytorchZip | Format::PytorchLegacy) {
        return None;
    }
    let rest = name.strip_prefix("callbacks.")?;
    // Lightning's state key: the callback's class name, then its `{…}` arguments if any.
    let class_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let class = &rest[..class_len];
    if !class.starts_with(|c: char| c.is_ascii_alphabetic()) || class_len == rest.len() {
        return None;
    }
    let key = if rest[class_len..].starts_with('{') {
        &rest[..class_len + rest[class_len..].find("}.")? + 1]
    } else {
        class
    };
    if !rest[key.len()..].starts_with('.') {
        return None;
    }
    ckpt.tensors
        .iter()
        .any(|t| t.name().starts_with("state_dict."))
        .then_some(class)
}

#[cfg(test)]
mod tests {
    use crate::audit::audit;
    use crate::config::Config;
    use crate::options::Options;
    use crate::testing::{checkpoint, codes, findings, storage_of, tensor};
    use crate::Severity;
    use tensorplay_engine::{Checkpoint, Device};

    fn float32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// A clean tensor 'good' (storage 1) listed before 'bad' (storage 0) holding `values`.
    fn with_bad(values: &[f32]) -> Checkpoint {
        let bad = storage_of(0, float32s(values), "cpu");
        let good = storage_of(1, float32s(&[1.0; 4]), "cpu");
        checkpoint(
            vec![
                tensor("good", &good, &[4], &[1], 0, Device::Cpu),
                tensor("bad", &bad, &[4], &[1], 0, Device::Cpu),
            ],
            vec![bad, good],
        )
    }

    #[test]
    fn nan_and_inf_fire_on_their_tensor_and_finite_values_do_not() {
        let ckpt = with_bad(&[0.0, 1.0, f32::NAN, f32::NEG_INFINITY]);
        let findings = findings(&ckpt);
        let found: Vec<_> = findings
            .iter()
            .map(|f| (f.code.as_str(), f.tensors.clone(), f.storage))
            .collect();
        assert_eq!(found, [("TP401", vec!["bad".to_owned()], Some(0))]);
        let message = &findings[0].message;
        assert!(
            message.contains("1 NaN, 0 +Inf, 1 -Inf among 4 elements; first at index 2"),
            "{message}"
        );

        assert!(codes(&with_bad(&[0.0, 1.0, f32::MAX, f32::MIN])).is_empty());

        // --metadata-only skips the rule.
        let options = Options {
            metadata_only: true,
            ..Default::default()
        };
        let report = audit(&ckpt, "hand-made.pt", &Config::default(), &options, None);
        assert!(report.findings.is_empty());
    }

    /// Lightning's layout: a weight holding `weight` under `state_dict.` (or, without
    /// `with_state_dict`, under `model.`) and ModelCheckpoint's `kth_value` holding
    /// `callback_value` under `callbacks.`.
    fn lightning(weight: f32, callback_value: f32, with_state_dict: bool) -> Checkpoint {
        let w = storage_of(0, float32s(&[0.5, weight]), "cpu");
        let kth = storage_of(1, float32s(&[callback_value]), "cpu");
        let weight_name = if with_state_dict {
            "state_dict.net.0.weight"
        } else {
            "model.net.0.weight"
        };
        checkpoint(
            vec![
                tensor(weight_name, &w, &[2], &[1], 0, Device::Cpu),
                tensor(
                    "callbacks.ModelCheckpoint{'monitor': None, 'mode': 'min'}.kth_value",
                    &kth,
                    &[],
                    &[],
                    0,
                    Device::Cpu,
                ),
            ],
            vec![w, kth],
        )
    }

    fn severities(ckpt: &Checkpoint, config: &Config) -> Vec<(String, Severity)> {
        audit(ckpt, "hand-made.ckpt", config, &Options::default(), None)
            .findings
            .into_iter()
            // A tensor's findings (an unsafe global's TP501 names none).
            .filter_map(|f| Some((f.tensors.first()?.clone(), f.severity)))
            .collect()
    }

    #[test]
    fn lightning_placeholders_are_info_and_weights_stay_errors() {
        let kth = "callbacks.ModelCheckpoint{'monitor': None, 'mode': 'min'}.kth_value";
        let default = Config::default();
        let found = findings(&lightning(1.0, f32::INFINITY, true));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, Severity::Info);
        assert!(
            found[0]
                .message
                .contains("Lightning callback state (ModelCheckpoint)"),
            "{}",
            found[0].message
        );
        // A NaN weight next to the placeholder is still an error.
        assert_eq!(
            severities(&lightning(f32::NAN, f32::INFINITY, true), &default),
            [
                ("state_dict.net.0.weight".to_owned(), Severity::Error),
                (kth.to_owned(), Severity::Info)
            ]
        );
        // NaN is never a placeholder, and without `state_dict.` weights it is no Lightning file.
        assert_eq!(
            severities(&lightning(1.0, f32::NAN, true), &default),
            [(kth.to_owned(), Severity::Error)]
        );
        assert_eq!(
            severities(&lightning(1.0, f32::NEG_INFINITY, false), &default),
            [(kth.to_owned(), Severity::Error)]
        );
        // A configured level does not raise the placeholder above info.
        let strict = Config::parse(
            std::path::Path::new("tensorplay.toml"),
            "[rules]\nTP401 = \"error\"\n",
        )
        .expect("config");
        assert_eq!(
            severities(&lightning(1.0, f32::INFINITY, true), &strict),
            [(kth.to_owned(), Severity::Info)]
        );
    }

    /// A joblib file holding `name` = [1.0, `value`], naming OPTICS's class when `optics`.
    fn estimator(name: &str, value: f32, optics: bool) -> Checkpoint {
        let s = storage_of(0, float32s(&[1.0, value]), "cpu");
        let mut ckpt = checkpoint(vec![tensor(name, &s, &[2], &[1], 0, Device::Cpu)], vec![s]);
        ckpt.format = tensorplay_engine::Format::Joblib;
        if optics {
            ckpt.unsafe_globals
                .push(tensorplay_engine::pickle::UnsafeGlobal {
                    module: "sklearn.cluster._optics".into(),
                    name: "OPTICS".into(),
                    member: "<pickle>".into(),
                    position: 0,
                    payload: String::new(),
                });
        }
        ckpt
    }

    #[test]
    fn an_estimator_s_attribute_infinite_by_definition_is_info_and_nothing_else_is() {
        let default = Config::default();
        let info = |name: &str| vec![(name.to_owned(), Severity::Info)];
        let error = |name: &str| vec![(name.to_owned(), Severity::Error)];
        let nested = "steps.0.1.core_distances_";
        assert_eq!(
            severities(&estimator("reachability_", f32::INFINITY, true), &default),
            info("reachability_")
        );
        assert_eq!(
            severities(&estimator(nested, f32::INFINITY, true), &default),
            info(nested)
        );
        // NaN is never by definition; nor is another attribute, or one of another estimator.
        for (name, value, optics) in [
            ("reachability_", f32::NAN, true),
            ("coef_", f32::INFINITY, true),
            ("reachability_", f32::INFINITY, false),
        ] {
            assert_eq!(
                severities(&estimator(name, value, optics), &default),
                error(name)
            );
        }
    }
}
