use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::text::{human_bytes, plural};

declare_rule!(FragmentationScore {
    code: "TP301",
    name: "fragmentation-score",
    severity: Info,
    reads_bytes: false,
    tags: ["memory", "performance"],
    summary: "Storage sizes are dispersed beyond the fragmentation threshold (default 5).",
    doc: "\
What it checks
  How dispersed the storage sizes are: the fragmentation score is the variance of all
  storage sizes (in bytes) divided by their mean squared, the squared coefficient of
  variation. Dividing by the mean alone would carry units (bytes) and grow with model
  size; the squared mean makes the score dimensionless, so the same threshold
  (`thresholds.fragmentation_score`, default 5) means the same thing for a 1 MB and a
  100 GB checkpoint. It fires above the threshold and needs at least two storages, not all
  empty.

Why it matters
  A few huge storages among many tiny ones fragment a caching allocator: the tiny ones
  split its segments and the huge ones then need fresh segments, so reserved memory grows
  well beyond what the tensors need ('trains fine, OOMs in production').

Example
  One 1 GiB embedding and 500 storages of a few KiB each: score far above 5.

How to fix
  Pack small tensors together (flattened parameter buffers), or load the largest tensors
  first so the allocator's big segments are not split.

Why info by default
  Ordinary models score far above 5: one storage per parameter puts a few large weights
  among many small biases and norms. Measured on the architectures' own state dicts:
  mobilenet_v3_small 52.9, resnet18 16.5, resnet50 15.7, gpt2 14.9, bert-base
  (masked LM) 10.8, vit_b_16 2.6, llama-7b 0.7. No threshold separates a hazard from
  these, so the score is shown at info; what the dispersion costs is measured by TP302,
  which loads the storages through the simulated caching allocator. Make it a gate with
  `TP301 = \"warning\"` under [rules] and a `thresholds.fragmentation_score` above your
  models' own.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let storages = &ctx.ckpt.storages;
    let sizes = storages.iter().map(|s| s.nbytes() as f64);
    let Some((score, mean)) = score(storages.len(), ctx.storage_facts.bytes_f64, sizes) else {
        return;
    };
    let threshold = ctx.settings.thresholds.fragmentation_score;
    if score <= threshold {
        return;
    }
    // What drives the score: the largest storage against the mean, named by its tensors.
    // The first of the largest: `max_by_key` keeps the last of equals.
    let largest = ctx.ckpt.storages.iter().rev().max_by_key(|s| s.nbytes());
    let (tensors, largest_text) = match largest {
        Some(s) => {
            let names: Vec<String> = ctx
                .ckpt
                .tensors
                .iter()
                .filter(|t| t.storage_index() == s.id().index())
                .map(|t| t.name().to_owned())
                .collect();
            let text = format!(
                "; the largest, storage {} ({}, {:.0}× the mean of {}), holds {}",
                s.id().index(),
                human_bytes(s.nbytes()),
                s.nbytes() as f64 / mean,
                human_bytes(mean as u64),
                match names.as_slice() {
                    [] => "no tensor".to_owned(),
                    [one] => format!("'{one}'"),
                    [one, rest @ ..] => format!("'{one}' and {} more", rest.len()),
                }
            );
            (names, text)
        }
        None => (Vec::new(), String::new()),
    };
    out.push(Draft {
        tensors,
        storage: largest.map(|s| s.id().index()),
        message: format!(
            "storage sizes have a fragmentation score of {score:.2} (variance / mean² over {}; threshold {threshold}){largest_text}",
            plural(storages.len(), "storage")
        ),
        fix: "pack small tensors into fewer storages, or load the largest tensors first".into(),
        ..Default::default()
    });
}

/// Variance / mean² of the `count` sizes (population variance), whose `sum` (in their
/// order) the caller has, and their mean; `None` below two sizes or when all are zero. One
/// pass over the sizes: a million storages' sizes are never collected.
pub(crate) fn score(
    count: usize,
    sum: f64,
    sizes: impl Iterator<Item = f64>,
) -> Option<(f64, f64)> {
    if count < 2 {
        return None;
    }
    let n = count as f64;
    let mean = sum / n;
    if mean == 0.0 {
        return None;
    }
    let variance = sizes.map(|s| (s - mean).powi(2)).sum::<f64>() / n;
    Some((variance / (mean * mean), mean))
}

#[cfg(test)]
mod tests {
    use crate::testing::{checkpoint, codes, storage, tensor};
    use tensorplay_engine::{Checkpoint, Device};

    #[test]
    fn the_score_is_dimensionless() {
        let score =
            |sizes: &[f64]| super::score(sizes.len(), sizes.iter().sum(), sizes.iter().copied());
        assert_eq!(score(&[4.0, 4.0, 4.0]), Some((0.0, 4.0)));
        // Scaling every size leaves the score unchanged.
        let (a, mean) = score(&[1.0, 1.0, 1.0, 97.0]).unwrap();
        let (b, _) = score(&[1e9, 1e9, 1e9, 97e9]).unwrap();
        assert!((a - b).abs() < 1e-9);
        // mean 25, variance (3·24² + 72²)/4 = 1728, score 2.7648
        assert!((a - 2.7648).abs() < 1e-9, "{a}");
        assert_eq!(mean, 25.0);
        assert_eq!(score(&[5.0]), None);
        assert_eq!(score(&[0.0, 0.0]), None);
    }

    /// One storage per size (in float32 elements), each fully viewed by one tensor.
    fn storages_of(elements: &[u64]) -> Checkpoint {
        let storages: Vec<_> = elements
            .iter()
            .enumerate()
            .map(|(id, &n)| storage(id, n, "cpu"))
            .collect();
        let tensors = storages
            .iter()
            .zip(elements)
            .map(|(s, &n)| {
                tensor(
                    &format!("w{}", s.id().index()),
                    s,
                    &[n],
                    &[1],
                    0,
                    Device::Cpu,
                )
            })
            .collect();
        checkpoint(tensors, storages)
    }

    #[test]
    fn one_large_storage_among_many_tiny_ones_fires() {
        // 4000 bytes and nine of 4: score 8.82.
        let mut sizes = vec![1000];
        sizes.extend([1; 9]);
        assert_eq!(codes(&storages_of(&sizes)), ["TP301"]);
        // 4000 bytes and four of 4: score 3.96, under the default 5.
        assert!(codes(&storages_of(&[1000, 1, 1, 1, 1])).is_empty());
    }
}
