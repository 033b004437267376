use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::views;

declare_rule!(SharedStorage {
    code: "TP106",
    name: "shared-storage",
    severity: Info,
    reads_bytes: false,
    tags: ["views"],
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
        if one_byte_range(shared) {
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
                shared.storage.id().index(),
                shared.storage.key(),
                names.join(", ")
            ),
            fix: "clone each tensor before converting to safetensors (`{k: v.clone() for k, v in sd.items()}`)".into(),
            tensors: names,
            storage: Some(shared.storage.id().index()),
            ..Default::default()
        });
    }
}

/// Whether every view of `shared` reaches the same bytes, at least one: every pair of views
/// is identical (two views that reach nothing, or the same empty range, are not).
fn one_byte_range(shared: &views::SharedStorage<'_>) -> bool {
    let Some(Some(first)) = shared.views.first().map(|v| &v.bytes) else {
        return false;
    };
    !first.is_empty() && shared.views.iter().all(|v| v.bytes.as_ref() == Some(first))
}

#[cfg(test)]
mod tests {
    use crate::testing::{checkpoint, codes, found, storage, tensor};
    use tensorplay_engine::Device;

    #[test]
    fn slices_side_by_side_in_one_storage_fire_and_separate_storages_do_not() {
        let s = storage(0, 8, "cpu");
        let halves = checkpoint(
            vec![
                tensor("a", &s, &[4], &[1], 0, Device::Cpu),
                tensor("b", &s, &[4], &[1], 4, Device::Cpu),
            ],
            vec![s.clone()],
        );
        let found: Vec<_> = found(&halves);
        assert_eq!(
            found,
            [(
                "TP106".to_owned(),
                vec!["a".to_owned(), "b".to_owned()],
                Some(0)
            )]
        );

        let (a, b) = (storage(0, 4, "cpu"), storage(1, 4, "cpu"));
        let separate = checkpoint(
            vec![
                tensor("a", &a, &[4], &[1], 0, Device::Cpu),
                tensor("b", &b, &[4], &[1], 0, Device::Cpu),
            ],
            vec![a, b],
        );
        assert!(codes(&separate).is_empty());
    }

    #[test]
    fn one_identical_alias_is_left_to_tp103() {
        let s = storage(0, 8, "cpu");
        let tied = checkpoint(
            vec![
                tensor("a", &s, &[8], &[1], 0, Device::Cpu),
                tensor("b", &s, &[8], &[1], 0, Device::Cpu),
            ],
            vec![s.clone()],
        );
        assert_eq!(codes(&tied), ["TP103"]);
    }

    #[test]
    fn an_alias_beside_a_view_that_reaches_no_bytes_fires() {
        // {'a': w, 'b': w[:], 'none': w[:0]}: 'none' shares no byte with the others (no pair
        // of it is identical), so they are not one alias.
        let s = storage(0, 8, "cpu");
        let with_empty = checkpoint(
            vec![
                tensor("a", &s, &[8], &[1], 0, Device::Cpu),
                tensor("b", &s, &[8], &[1], 0, Device::Cpu),
                tensor("none", &s, &[0], &[1], 0, Device::Cpu),
            ],
            vec![s.clone()],
        );
        assert_eq!(codes(&with_empty), ["TP103", "TP106"]);
    }
}
