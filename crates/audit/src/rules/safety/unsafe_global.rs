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
                g.member,
                g.position,
                shown(&g.module),
                shown(&g.name)
            ),
            fix: "do not load this file with weights_only=False; re-save a plain state_dict from a trusted environment or convert to safetensors".into(),
        });
    }
}

/// A name from the file as it may be printed: control, invisible and bidi characters
/// escaped, so a crafted name cannot rewrite the terminal line that reports it.
fn shown(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_graphic() || (c.is_alphanumeric() && !c.is_control()) {
                c.to_string()
            } else {
                c.escape_unicode().to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {

    use crate::testing::{checkpoint, codes, findings, storage, tensor};
    use tensorplay_engine::pickle::UnsafeGlobal;
    use tensorplay_engine::Device;

    #[test]
    fn a_global_outside_the_allowlist_fires_with_where_it_is() {
        let s = storage(0, 4, "cpu");
        let mut ckpt = checkpoint(vec![tensor("w", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        assert!(codes(&ckpt).is_empty());

        ckpt.unsafe_globals.push(UnsafeGlobal {
            module: "posix".into(),
            name: "system".into(),
            member: "archive/data.pkl".into(),
            position: 57,
        });
        let findings = findings(&ckpt);
        assert_eq!(
            findings.iter().map(|f| f.code.as_str()).collect::<Vec<_>>(),
            ["TP501"]
        );
        assert!(
            findings[0]
                .message
                .starts_with("archive/data.pkl at byte 57 references posix.system"),
            "{}",
            findings[0].message
        );
    }

    #[test]
    fn names_that_could_rewrite_the_terminal_are_escaped() {
        assert_eq!(super::shown("posix"), "posix");
        assert_eq!(super::shown("é_name"), "é_name");
        assert_eq!(super::shown("a\rb"), "a\\u{d}b");
        assert_eq!(super::shown("x\u{202e}y z"), "x\\u{202e}y\\u{20}z");
    }
}
