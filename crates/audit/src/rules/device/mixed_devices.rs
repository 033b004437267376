use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::text::plural;

declare_rule!(MixedDevices {
    code: "TP201",
    name: "mixed-devices",
    severity: Error,
    reads_bytes: false,
    tags: ["devices", "portability"],
    summary: "One checkpoint's storages were saved from more than one device.",
    doc: "\
What it checks
  The location each storage records (`cpu`, `cuda:0`, `cuda:1`…): all must be the same.
  Meta storages hold no data and are left out (they are TP204's finding).

Why it matters
  torch.load restores each storage to the device it was saved from. A checkpoint spread
  over cuda:0 and cuda:1 needs both GPUs (or a map_location) to load, and a model whose
  weights land on different devices fails at the first matmul.

Example
  A model-parallel state dict saved without `.cpu()`: layers 0-11 on cuda:0, 12-23 on cuda:1.

How to fix
  Move everything to one device before saving: `torch.save(model.cpu().state_dict(), ...)`,
  or load with `map_location='cpu'` and re-save.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let by = &ctx.storage_facts.by_location;
    if by.len() < 2 {
        return;
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(loc, ids)| format!("{loc} ({})", plural(ids.len(), "storage")))
        .collect();
    out.push(Draft {
        tensors: Vec::new(),
        storage: None,
        message: format!("storages were saved from {}: {}", plural(by.len(), "device"), parts.join(", ")),
        fix: "move every tensor to one device before saving (`model.cpu().state_dict()`), or load with map_location and re-save".into(),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use crate::testing::{checkpoint, codes, storage, tensor};
    use std::sync::Arc;
    use tensorplay_engine::{DType, DataPtr, Device};

    #[test]
    fn storages_from_two_devices_fire_and_from_one_device_do_not() {
        let (a, b) = (storage(0, 4, "cpu"), storage(1, 4, "cuda:0"));
        let mixed = checkpoint(
            vec![
                tensor("a", &a, &[4], &[1], 0, Device::Cpu),
                tensor("b", &b, &[4], &[1], 0, Device::Cuda(Some(0))),
            ],
            vec![a, b],
        );
        // TP202 too: cuda:0 is outside the default allowed_devices.
        assert_eq!(codes(&mixed), ["TP201", "TP202"]);

        let (a, b) = (storage(0, 4, "cpu"), storage(1, 4, "cpu"));
        let one = checkpoint(
            vec![
                tensor("a", &a, &[4], &[1], 0, Device::Cpu),
                tensor("b", &b, &[4], &[1], 0, Device::Cpu),
            ],
            vec![a, b],
        );
        assert!(codes(&one).is_empty());
    }

    #[test]
    fn a_meta_storage_beside_cpu_ones_is_not_a_second_device() {
        let a = storage(0, 4, "cpu");
        let m = Arc::new(tensorplay_engine::testing::storage(
            1,
            "1",
            DType::Float32,
            16,
            "meta",
            DataPtr::none(Device::Meta),
        ));
        let ckpt = checkpoint(
            vec![
                tensor("a", &a, &[4], &[1], 0, Device::Cpu),
                tensor("m", &m, &[4], &[1], 0, Device::Meta),
            ],
            vec![a, m],
        );
        assert_eq!(codes(&ckpt), ["TP204"]);
    }
}
