use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::views::Relation;

declare_rule!(GradView {
    code: "TP102",
    name: "grad-view",
    severity: Error,
    reads_bytes: false,
    tags: ["views"],
    summary: "A requires_grad tensor shares bytes with another tensor.",
    doc: "\
What it checks
  Whether a view is safe for autograd: a tensor that requires grad must not share bytes
  with any other tensor of the checkpoint, whether it contains the other's bytes, lies
  inside them or partly overlaps them. An identical alias (same bytes) is TP103's finding,
  not this one.

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
        let requires_grad = |i: u32| {
            shared
                .views
                .get(i as usize)
                .is_some_and(|v| v.tensor.tensor_impl().requires_grad())
        };
        // (trainable view, other view) for each pair that shares some bytes but not all,
        // from the listed relations: scanning every other view per trainable view would
        // take quadratic time in the views of one storage. The relations come sorted by
        // (i, j), so after a stable sort by the trainable view each one's others are in view
        // order, as the finding names them.
        let mut touching: Vec<(u32, u32)> = Vec::new();
        for &(i, j, relation) in &shared.relations {
            if relation == Relation::Identical {
                continue;
            }
            if requires_grad(i) {
                touching.push((i, j));
            }
            if requires_grad(j) {
                touching.push((j, i));
            }
        }
        touching.sort_by_key(|&(view, _)| view);
        for group in touching.chunk_by(|a, b| a.0 == b.0) {
            let Some(view) = group
                .first()
                .and_then(|&(i, _)| shared.views.get(i as usize))
            else {
                continue;
            };
            let others: Vec<String> = group
                .iter()
                .filter_map(|&(_, j)| shared.views.get(j as usize))
                .map(|v| v.tensor.name().to_owned())
                .collect();
            if others.is_empty() {
                continue;
            }
            let mut tensors = vec![view.tensor.name().to_owned()];
            tensors.extend(others.iter().cloned());
            out.push(Draft {
                tensors,
                storage: Some(shared.storage.id().index()),
                message: format!(
                    "'{}' requires grad and shares bytes with {} in storage {}: in-place updates through either corrupt the other",
                    view.tensor.name(),
                    others.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", "),
                    shared.storage.id().index()
                ),
                fix: format!(
                    "save `{}.clone().detach()` for the views, or save only the base",
                    others.first().map_or("view", String::as_str)
                ),
                ..Default::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {

    use crate::testing::{checkpoint, codes, findings, storage, tensor};
    use std::sync::Arc;
    use tensorplay_engine::{DType, Device, Layout, Storage, Tensor, TensorImpl};

    /// A [4, 6] float32 tensor over all of `storage`, a trainable parameter or not.
    fn leaf(storage: &Arc<Storage>, requires_grad: bool) -> Tensor {
        let layout = Layout::new(vec![4, 6], vec![6, 1], 0).expect("layout");
        let imp = TensorImpl::new(
            layout,
            DType::Float32,
            Device::Cpu,
            requires_grad,
            requires_grad,
            Arc::clone(storage),
        );
        Tensor::new("leaf", Arc::new(imp))
    }

    #[test]
    fn a_view_of_a_trainable_tensor_fires_and_a_view_of_a_frozen_one_does_not() {
        // leaf = torch.randn(4, 6, requires_grad=True)
        // {'leaf': leaf, 'chain': leaf.detach().narrow(0, 1, 2).t()}
        let s = storage(0, 24, "cpu");
        let with = |requires_grad| {
            checkpoint(
                vec![
                    leaf(&s, requires_grad),
                    tensor("chain", &s, &[6, 2], &[1, 6], 6, Device::Cpu),
                ],
                vec![s.clone()],
            )
        };
        let trainable = with(true);
        // TP105: 'chain' is transposed; TP106: two tensors share the storage.
        assert_eq!(codes(&trainable), ["TP102", "TP105", "TP106"]);
        let found: Vec<_> = findings(&trainable)
            .into_iter()
            .filter(|f| f.code == "TP102")
            .map(|f| (f.tensors, f.storage))
            .collect();
        assert_eq!(
            found,
            [(vec!["leaf".to_owned(), "chain".to_owned()], Some(0))]
        );

        assert_eq!(codes(&with(false)), ["TP105", "TP106"]);
    }

    #[test]
    fn an_identical_alias_of_a_trainable_tensor_is_left_to_tp103() {
        let s = storage(0, 24, "cpu");
        let tied = checkpoint(
            vec![
                leaf(&s, true),
                tensor("tied", &s, &[4, 6], &[6, 1], 0, Device::Cpu),
            ],
            vec![s.clone()],
        );
        assert_eq!(codes(&tied), ["TP103"]);
    }
}
