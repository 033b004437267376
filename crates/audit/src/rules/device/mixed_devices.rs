use super::storages_by_location;
use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(MixedDevices {
    code: "TP201",
    name: "mixed-devices",
    severity: Error,
    reads_bytes: false,
    summary: "One checkpoint's storages were saved from more than one device.",
    doc: "\
What it checks
  The location each storage records (`cpu`, `cuda:0`, `cuda:1`…): all must be the same.

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
    let by = storages_by_location(ctx);
    if by.len() < 2 {
        return;
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(loc, ids)| format!("{loc} ({} storages)", ids.len()))
        .collect();
    out.push(Draft {
        tensors: Vec::new(),
        storage: None,
        message: format!("storages were saved from {} devices: {}", by.len(), parts.join(", ")),
        fix: "move every tensor to one device before saving (`model.cpu().state_dict()`), or load with map_location and re-save".into(),
    });
}
