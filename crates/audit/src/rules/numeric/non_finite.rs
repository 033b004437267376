use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(NonFiniteValues {
    code: "TP401",
    name: "non-finite",
    severity: Error,
    reads_bytes: true,
    summary: "NaN or ±Inf in a floating tensor (all float dtypes incl. bf16, f16, float8).",
    doc: "\
What it checks
  Every element of every floating tensor (float64/32/16, bfloat16, the float8 variants,
  complex parts) for NaN and ±Inf, from the raw bits: a value is non-finite when its
  exponent bits are all ones, or per each float8 format's own NaN encoding. Reports the
  counts and the first index. Reads every byte; `--metadata-only` skips it.

Why it matters
  A checkpoint saved after training diverged loads without complaint and produces NaN
  everywhere: the failure shows up in production, not at load time.

Example
  A fp16 run whose loss scale overflowed: 'decoder.4.weight' holds 12 NaN.

How to fix
  Find the step that diverged (lower the learning rate, fix loss scaling, clip gradients)
  and re-save from the last healthy checkpoint.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let Some(scans) = &ctx.scans else { return };
    for (index, t) in ctx.ckpt.tensors.iter().enumerate() {
        let Some(found) = scans.get(&index) else {
            continue;
        };
        if found.is_clean() {
            continue;
        }
        let numel = t.tensor_impl().layout().numel();
        out.push(Draft {
            tensors: vec![t.name().to_owned()],
            storage: Some(t.tensor_impl().storage().id()),
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
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::audit::audit;
    use crate::config::Config;
    use crate::options::Options;
    use crate::testing::{checkpoint, codes, findings, storage_of, tensor};
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
}
