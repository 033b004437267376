use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::text::plural;

declare_rule!(UnexpectedDevice {
    code: "TP202",
    name: "unexpected-device",
    severity: Warning,
    reads_bytes: false,
    tags: ["devices", "portability"],
    summary: "A storage's device is outside `allowed_devices` (default [\"cpu\"]).",
    doc: "\
What it checks
  Every storage's recorded location against `allowed_devices` in tensorplay.toml
  (default `[\"cpu\"]`). One finding per unexpected device. Meta storages hold no data
  and are left out (they are TP204's finding).

Why it matters
  A checkpoint saved from `cuda:1` breaks every CPU-only loader and every machine with one
  GPU unless the caller remembers `map_location`.

Example
  torch.save(model.state_dict(), 'model.pt') on a GPU worker: storages record 'cuda:0'.

How to fix
  Save from CPU (`{k: v.cpu() for k, v in sd.items()}`), or add the device to
  `allowed_devices` if GPU-located checkpoints are intended.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let allowed = &ctx.settings.allowed_devices;
    for (&location, ids) in &ctx.storage_facts.by_location {
        if allowed.iter().any(|a| a == location) {
            continue;
        }
        // A lookup per tensor, not a search of the ids: a million storages saved from one
        // GPU stay linear.
        let mut here = vec![false; ctx.ckpt.storages.len()];
        for id in ids.iter() {
            if let Some(slot) = here.get_mut(id) {
                *slot = true;
            }
        }
        let tensors: Vec<String> = ctx
            .ckpt
            .tensors
            .iter()
            .filter(|t| {
                let id = t.storage_index();
                here.get(id).copied().unwrap_or(false)
            })
            .map(|t| t.name().to_owned())
            .collect();
        out.push(Draft {
            message: format!(
                "{} ({}) {} saved from {location}, outside allowed_devices [{}]: loading needs map_location",
                plural(ids.len(), "storage"),
                plural(tensors.len(), "tensor"),
                if ids.len() == 1 { "was" } else { "were" },
                allowed.join(", ")
            ),
            fix: format!("save from CPU (`{{k: v.cpu() for k, v in sd.items()}}`) or add \"{location}\" to allowed_devices"),
            tensors,
            storage: ids.first().filter(|_| ids.len() == 1),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::options::Options;
    use crate::testing::{checkpoint, codes, found_with, storage, tensor};
    use tensorplay_engine::Device;

    #[test]
    fn storages_outside_allowed_devices_fire_once_per_device_naming_their_tensors() {
        let (a, b) = (storage(0, 4, "cuda:1"), storage(1, 4, "cuda:1"));
        let gpu = checkpoint(
            vec![
                tensor("a", &a, &[4], &[1], 0, Device::Cuda(Some(1))),
                tensor("b", &b, &[4], &[1], 0, Device::Cuda(Some(1))),
            ],
            vec![a, b],
        );
        let names = vec!["a".to_owned(), "b".to_owned()];
        // Two storages: the finding names no single one.
        assert_eq!(
            found_with(&gpu, &Config::default(), &Options::default()),
            [("TP202".to_owned(), names, None)]
        );

        let mut allowed = Config::default();
        allowed.settings.allowed_devices.push("cuda:1".into());
        assert!(found_with(&gpu, &allowed, &Options::default()).is_empty());

        let s = storage(0, 4, "cpu");
        let cpu = checkpoint(vec![tensor("a", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        assert!(codes(&cpu).is_empty());
    }

    #[test]
    fn a_single_unexpected_storage_is_named() {
        let s = storage(0, 4, "mps");
        let ckpt = checkpoint(
            vec![tensor(
                "w",
                &s,
                &[4],
                &[1],
                0,
                Device::Other(Box::new("mps".into())),
            )],
            vec![s],
        );
        assert_eq!(
            found_with(&ckpt, &Config::default(), &Options::default()),
            [("TP202".to_owned(), vec!["w".to_owned()], Some(0))]
        );
    }
}
