use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::views::Relation;

declare_rule!(SharedStorage {
    code: "TP106",
    name: "shared-storage",
    severity: Info,
    reads_bytes: false,
    summary: "Several tensors live in one storage, side by side or one inside another.",
    doc: "\
What it checks
  Storages viewed by more than one tensor, where the views are not all one identical alias
  (that is TP103): views of a base, slices next to each other, flattened parameter buffers.

Why it matters
  It is how PyTorch saves views, and it is often deliberate, but it blocks conversion to
  safetensors ('Some tensors share memory') and ties the tensors' lifetimes together.

Example
  numbers = torch.arange(9.); [numbers, numbers[1::2], numbers[2:5].view(3, 1)]

How to fix
  Clone each tensor before converting, or use `safetensors.torch.save_model`, which
  deduplicates shared names.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for shared in &ctx.shared {
        if shared
            .relations
            .iter()
            .all(|&(_, _, r)| r == Relation::Identical)
        {
            continue;
        }
        let names: Vec<String> = shared
            .views
            .iter()
            .map(|v| v.tensor.name().to_owned())
            .collect();
        out.push(Draft {
            message: format!(
                "{} tensors share storage {} (key '{}'): {}",
                names.len(),
                shared.storage.id(),
                shared.storage.key(),
                names.join(", ")
            ),
            fix: "clone each tensor before converting to safetensors (`{k: v.clone() for k, v in sd.items()}`)".into(),
            tensors: names,
            storage: Some(shared.storage.id()),
        });
    }
}
