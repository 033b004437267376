use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::views::Relation;

declare_rule!(GradView {
    code: "TP102",
    name: "grad-view",
    severity: Error,
    reads_bytes: false,
    summary: "A requires_grad tensor shares bytes with another tensor.",
    doc: "\
What it checks
  The design's `is_safe_view`: a tensor that requires grad must not share bytes with any
  other tensor of the checkpoint (other than an identical alias, which is TP103).

Why it matters
  A view of a trainable leaf breaks autograd the moment anything updates it in place
  ('a view of a leaf Variable that requires grad is being used in an in-place operation'),
  and an optimizer step on the leaf silently rewrites the view.

Example
  leaf = torch.randn(4, 6, requires_grad=True)
  {'leaf': leaf, 'chain': leaf.detach().narrow(0, 1, 2).t()}

How to fix
  Cut the view loose with `.clone().detach()` (it gets its own storage), or save only the base.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for shared in &ctx.shared {
        for (i, view) in shared.views.iter().enumerate() {
            if !view.tensor.tensor_impl().requires_grad() {
                continue;
            }
            let others: Vec<String> = shared
                .relations
                .iter()
                .filter(|&&(a, b, rel)| {
                    (a == i || b == i) && !matches!(rel, Relation::Disjoint | Relation::Identical)
                })
                .filter_map(|&(a, b, _)| shared.views.get(if a == i { b } else { a }))
                .map(|v| v.tensor.name().to_owned())
                .collect();
            if others.is_empty() {
                continue;
            }
            let mut tensors = vec![view.tensor.name().to_owned()];
            tensors.extend(others.iter().cloned());
            out.push(Draft {
                tensors,
                storage: Some(shared.storage.id()),
                message: format!(
                    "'{}' requires grad and shares bytes with {} in storage {}: in-place updates through either corrupt the other",
                    view.tensor.name(),
                    others.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", "),
                    shared.storage.id()
                ),
                fix: format!(
                    "save `{}.clone().detach()` for the views, or save only the base",
                    others.first().map_or("view", String::as_str)
                ),
            });
        }
    }
}
