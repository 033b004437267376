use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use tensorplay_engine::{Format, WeightsOnly};

declare_rule!(WeightsOnlyLoad {
    code: "TP505",
    name: "weights-only-load",
    severity: Warning,
    reads_bytes: false,
    tags: ["compatibility", "pickle"],
    summary: "torch.load with its default weights_only=True would refuse the file.",
    doc: "\
What it checks
  Whether `torch.load(path)` — `weights_only=True` by default since torch 2.6 — would
  load the file. tensorplay replays every pickle torch.load runs through a model of torch's
  weights-only unpickler (torch 2.9.1): the opcodes it supports (protocol 2's; a FRAME, POP
  or SHORT_BINUNICODE is refused), its allowlist and blocked modules, the objects it builds
  (BUILD only on tensors, parameters, OrderedDicts and allowlisted types; APPEND only to
  lists), the persistent ids it accepts, and what the loader refuses outright (TorchScript
  archives, plain pickles without torch.save's magic number). The message is torch's.
  Files torch.load is the loader of are judged: torch.save zips and legacy files and their
  sharded indexes, when they name no unsafe global (those fail as TP501). A TorchScript
  archive is TP504's (which says torch.load refuses it). `inspect --format json` gives the
  verdict (its `weights_only` field) for every file torch.load reads, plain pickles too.

Why it matters
  A checkpoint that loads with `weights_only=False` in a trusted notebook fails in
  production, where the default is the safe loader, or pushes its users to turn the safe
  loader off. A file the weights-only loader refuses needs either a fix at save time or an
  explicit, reviewed allowlist (`torch.serialization.add_safe_globals`).

Example
  pickle.dump(state_dict, f, protocol=4)   # FRAME and SHORT_BINUNICODE: 'Unsupported operand 149'
  torch.save({'cfg': argparse.Namespace(...)}, 'ckpt.pt')  # 'Unsupported global: GLOBAL argparse.Namespace'

How to fix
  Save with `torch.save` (protocol 2) and keep only tensors, containers and primitive
  values in what is saved; or, for a class you trust, allowlist it where the file is loaded
  with `torch.serialization.add_safe_globals`.",
    check: check,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let Some(WeightsOnly::Refuses { member, reason }) = &ctx.ckpt.weights_only else {
        return;
    };
    // Said already, or not torch.load's file: a file naming unsafe globals fails as TP501, a
    // TorchScript archive is TP504 (which says torch.load refuses it), a plain pickle is
    // pickle.load's.
    let torch_loads_it = matches!(
        ctx.ckpt.format,
        Format::PytorchZip | Format::PytorchLegacy | Format::PytorchIndex
    );
    if !torch_loads_it || !ctx.ckpt.unsafe_globals.is_empty() {
        return;
    }
    out.push(Draft {
        tensors: Vec::new(),
        storage: None,
        message: format!(
            "torch.load (weights_only=True, its default since torch 2.6) would refuse this file: in {member}: {reason}"
        ),
        fix: "save with torch.save and keep only tensors, containers and primitive values, or allowlist a trusted class with torch.serialization.add_safe_globals where the file is loaded".into(),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use super::WeightsOnlyLoad;
    use crate::testing::{checkpoint, codes, findings, storage, tensor};
    use tensorplay_engine::pickle::UnsafeGlobal;
    use tensorplay_engine::{Device, Format, WeightsOnly};

    fn has_tp505(ckpt: &tensorplay_engine::Checkpoint) -> bool {
        codes(ckpt)
            .iter()
            .any(|c| c == WeightsOnlyLoad::CODE.as_str())
    }

    #[test]
    fn a_refusal_is_a_warning_quoting_torch_and_a_load_is_silent() {
        let s = storage(0, 4, "cpu");
        let mut ckpt = checkpoint(vec![tensor("w", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        ckpt.weights_only = Some(WeightsOnly::Loads);
        assert!(!has_tp505(&ckpt));
        ckpt.weights_only = None;
        assert!(!has_tp505(&ckpt));
        ckpt.weights_only = Some(WeightsOnly::refuses(
            "archive/data.pkl",
            "Unsupported operand 149",
        ));
        let all = findings(&ckpt);
        let f = all
            .iter()
            .find(|f| f.code == WeightsOnlyLoad::CODE)
            .expect("TP505");
        assert_eq!(f.severity, crate::Severity::Warning);
        assert!(
            f.message
                .ends_with("would refuse this file: in archive/data.pkl: Unsupported operand 149"),
            "{}",
            f.message
        );
        // Not torch.load's file: a plain pickle.
        ckpt.format = Format::Pickle;
        assert!(!has_tp505(&ckpt));
    }

    #[test]
    fn a_file_naming_unsafe_globals_is_left_to_tp501() {
        let s = storage(0, 4, "cpu");
        let mut ckpt = checkpoint(vec![tensor("w", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        ckpt.unsafe_globals = vec![UnsafeGlobal {
            module: "builtins".into(),
            name: "eval".into(),
            member: "archive/data.pkl".into(),
            position: 2,
            payload: String::new(),
        }];
        ckpt.weights_only = Some(WeightsOnly::refuses(
            "archive/data.pkl",
            "Unsupported operand 149",
        ));
        assert!(!has_tp505(&ckpt));
        assert!(codes(&ckpt).iter().any(|c| c == "TP501"));
    }
}
