use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::views::Relation;

declare_rule!(ViewOverlap {
    code: "TP101",
    name: "view-overlap",
    severity: Error,
    reads_bytes: false,
    tags: ["views"],
    summary: "Two tensors' byte ranges in one storage partly overlap.",
    doc: "\
What it checks
  Pairs of tensors in one storage whose byte ranges overlap without one containing the
  other: each has bytes of its own and some bytes in common. A range runs from a view's
  lowest to its highest byte, so two interleaved strided views (the even and the odd
  elements of one vector) count as overlapping too.

Why it matters
  Neither is a view of the other, yet they alias memory: an in-place update of one
  (optimizer step, `add_`, `copy_`) silently changes part of the other. Loading keeps the
  sharing, so the corruption ships with the checkpoint.

Example
  base = torch.arange(10.); sd = {'a': base[0:6], 'b': base[4:10]}
  'a' reaches bytes [0, 24) and 'b' [16, 40) of the same storage.

How to fix
  Give each tensor its own storage before saving: `{k: v.clone() for k, v in sd.items()}`.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for shared in &ctx.shared {
        for &(i, j, relation) in &shared.relations {
            if relation != Relation::PartialOverlap {
                continue;
            }
            let (Some(a), Some(b)) = (shared.views.get(i as usize), shared.views.get(j as usize))
            else {
                continue;
            };
            let (Some(ra), Some(rb)) = (&a.bytes, &b.bytes) else {
                continue;
            };
            out.push(Draft {
                tensors: vec![a.tensor.name().to_owned(), b.tensor.name().to_owned()],
                storage: Some(shared.storage.id().index()),
                message: format!(
                    "'{}' (bytes [{}, {})) and '{}' (bytes [{}, {})) partly overlap in storage {}",
                    a.tensor.name(),
                    ra.start,
                    ra.end,
                    b.tensor.name(),
                    rb.start,
                    rb.end,
                    shared.storage.id().index()
                ),
                fix: format!(
                    "save independent copies: `{}.clone()` and `{}.clone()`",
                    a.tensor.name(),
                    b.tensor.name()
                ),
                ..Default::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {

    use crate::testing::{checkpoint, codes, findings, storage, tensor};
    use tensorplay_engine::{Checkpoint, Device};

    /// 'a' and 'b': `(size, stride, offset)` views of one 10-element float32 storage.
    fn pair(a: (u64, u64, u64), b: (u64, u64, u64)) -> Checkpoint {
        let s = storage(0, 10, "cpu");
        checkpoint(
            vec![
                tensor("a", &s, &[a.0], &[a.1], a.2, Device::Cpu),
                tensor("b", &s, &[b.0], &[b.1], b.2, Device::Cpu),
            ],
            vec![s.clone()],
        )
    }

    #[test]
    fn partly_overlapping_slices_fire_and_adjacent_or_nested_ones_do_not() {
        // base = torch.arange(10.); sd = {'a': base[0:6], 'b': base[4:10]}
        let overlapping = pair((6, 1, 0), (6, 1, 4));
        assert_eq!(codes(&overlapping), ["TP101", "TP106"]);
        let found: Vec<_> = findings(&overlapping)
            .into_iter()
            .filter(|f| f.code == "TP101")
            .map(|f| (f.tensors, f.storage, f.message))
            .collect();
        assert_eq!(
            found,
            [(
                vec!["a".to_owned(), "b".to_owned()],
                Some(0),
                "'a' (bytes [0, 24)) and 'b' (bytes [16, 40)) partly overlap in storage 0"
                    .to_owned()
            )]
        );

        // base[0:5] and base[5:10]
        assert_eq!(codes(&pair((5, 1, 0), (5, 1, 5))), ["TP106"]);
        // base and base[3:7]
        assert_eq!(codes(&pair((10, 1, 0), (4, 1, 3))), ["TP106"]);
    }

    #[test]
    fn interleaved_strided_views_count_as_overlapping() {
        // base[0::2] reaches bytes [0, 36), base[1::2] bytes [4, 40).
        let interleaved = pair((5, 2, 0), (5, 2, 1));
        assert!(codes(&interleaved).contains(&"TP101".to_owned()));
    }
}
