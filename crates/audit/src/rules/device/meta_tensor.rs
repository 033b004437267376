use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::Device;

declare_rule!(MetaTensor {
    code: "TP204",
    name: "meta-tensor",
    severity: Error,
    reads_bytes: false,
    summary: "A tensor carries no data (meta device).",
    doc: "\
What it checks
  Tensors on the meta device, or over a meta storage: shape and dtype without any bytes.

Why it matters
  A model initialised on the meta device (deferred init, `init_empty_weights`) and saved
  before its weights were materialised ships parameters with no values; loading them
  leaves the model empty or fails with 'Cannot copy out of meta tensor'.

Example
  {'m': torch.empty(3, 4, device='meta')}

How to fix
  Materialise the weights (`model.to_empty(device='cpu')` then initialise or load real
  weights) before saving.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for t in &ctx.ckpt.tensors {
        let imp = t.tensor_impl();
        if *imp.device() != Device::Meta && *imp.storage().device() != Device::Meta {
            continue;
        }
        out.push(Draft {
            tensors: vec![t.name().to_owned()],
            storage: Some(imp.storage().id()),
            message: format!(
                "'{}' is on the meta device: the file holds no data for its {:?} {}",
                t.name(),
                imp.layout().sizes(),
                imp.dtype()
            ),
            fix: "materialise the weights (`to_empty` then initialise or load) before saving"
                .into(),
        });
    }
}
