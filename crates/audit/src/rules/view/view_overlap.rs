use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::views::Relation;

declare_rule!(ViewOverlap {
    code: "TP101",
    name: "view-overlap",
    severity: Error,
    reads_bytes: false,
    summary: "Two tensors' byte ranges in one storage partly overlap.",
    doc: "\
What it checks
  Pairs of tensors in one storage whose byte ranges overlap without one containing the
  other: each has bytes of its own and some bytes in common.

Why it matters
  Neither is a view of the other, yet they alias memory: an in-place update of one
  (optimizer step, `add_`, `copy_`) silently changes part of the other. Loading keeps the
  sharing, so the corruption ships with the checkpoint.

Example
  base = torch.arange(10.); sd = {'a': base[0:6], 'b': base[4:10]}
  'a' reaches bytes [0, 24) and 'b' [16, 40) of the same storage.

How to fix
  Give each tensor its own storage before saving: `{k: v.clone() for k, v in sd.items()}`.
  Ranges are lowest-to-highest byte, so two interleaved strided views also count.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for shared in &ctx.shared {
        for &(i, j, relation) in &shared.relations {
            if relation != Relation::PartialOverlap {
                continue;
            }
            let (Some(a), Some(b)) = (shared.views.get(i), shared.views.get(j)) else {
                continue;
            };
            let (Some(ra), Some(rb)) = (&a.bytes, &b.bytes) else {
                continue;
            };
            out.push(Draft {
                tensors: vec![a.tensor.name().to_owned(), b.tensor.name().to_owned()],
                storage: Some(shared.storage.id()),
                message: format!(
                    "'{}' (bytes [{}, {})) and '{}' (bytes [{}, {})) partly overlap in storage {}",
                    a.tensor.name(),
                    ra.start,
                    ra.end,
                    b.tensor.name(),
                    rb.start,
                    rb.end,
                    shared.storage.id()
                ),
                fix: format!(
                    "save independent copies: `{}.clone()` and `{}.clone()`",
                    a.tensor.name(),
                    b.tensor.name()
                ),
            });
        }
    }
}
