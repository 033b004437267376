use super::storages_by_location;
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(UnexpectedDevice {
    code: "TP202",
    name: "unexpected-device",
    severity: Warning,
    reads_bytes: false,
    summary: "A storage's device is outside `allowed_devices` (default [\"cpu\"]).",
    doc: "\
What it checks
  Every storage's recorded location against `allowed_devices` in tensorplay.toml
  (default `[\"cpu\"]`). One finding per unexpected device.

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
    for (location, ids) in storages_by_location(ctx) {
        if allowed.iter().any(|a| a == location) {
            continue;
        }
        let tensors: Vec<String> = ctx
            .ckpt
            .tensors
            .iter()
            .filter(|t| ids.contains(&t.tensor_impl().storage().id()))
            .map(|t| t.name().to_owned())
            .collect();
        out.push(Draft {
            message: format!(
                "{} storages ({} tensors) were saved from {location}, outside allowed_devices [{}]: loading needs map_location",
                ids.len(),
                tensors.len(),
                allowed.join(", ")
            ),
            fix: format!("save from CPU (`{{k: v.cpu() for k, v in sd.items()}}`) or add \"{location}\" to allowed_devices"),
            tensors,
            storage: ids.first().copied().filter(|_| ids.len() == 1),
        });
    }
}
