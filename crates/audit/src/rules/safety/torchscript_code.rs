use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::Severity;

declare_rule!(TorchscriptCode {
    code: "TP504",
    name: "torchscript-code",
    severity: Warning,
    reads_bytes: false,
    tags: ["security", "torchscript"],
    summary: "A TorchScript archive carries code that torch.jit.load compiles and runs.",
    doc: "\
What it checks
  Whether the checkpoint is a TorchScript archive (`torch.jit.save`; it has a
  `constants.pkl`), and lists the code members it carries (`code/__torch__/….py`) and those
  that define a `__setstate__` method. tensorplay reads the code as text and never compiles
  it. When a `__setstate__` exists the finding is an error whatever level is configured
  (unless the rule is off): that code runs while the file loads.

  One `__setstate__` is torch's own and does not make the finding an error: that of the
  quantized convolutions (`torch.ao.nn.quantized` Conv1d/2d/3d and ConvTranspose1d/2d/3d,
  `torch.ao.nn.intrinsic.quantized` ConvReLU…), which every scripted quantized model with a
  convolution carries. It is recognised by what it does, not by its class name alone: a
  member `code/__torch__/torch/ao/nn/(intrinsic/)quantized/….py` whose every `__setstate__`
  is, line by line as `torch.jit.save` prints `_ConvNd.__setstate__`, attributes set from
  the state tuple and one call `set_weight_bias(state[10], state[11])`, and whose
  `set_weight_bias` only reads attributes, unpacks them into lists and stores what
  `ops.quantized.conv*_prepack(w, b, …)` returns in `_packed_params`. Any other statement,
  call, decorator or definition in such a class, and any `__setstate__` elsewhere, is code
  from the file and an error. The finding names the recognised members and stays at the
  configured level: the archive's code still runs when called.

Why it matters
  `torch.jit.load` compiles the archive's code, and `torch.load` hands it any TorchScript
  archive, whatever `weights_only` says before torch 2.6 (CVE-2025-32434); since 2.6
  `torch.load(weights_only=True)` refuses it. The code is the model: `forward` runs when
  called, and `__setstate__` runs at load time, before any user call, for every object
  whose class defines it.

Example
  class M(nn.Module):
      @torch.jit.export
      def __setstate__(self, state: Tuple[int]) -> None: ...   # runs in torch.jit.load
  torch.jit.save(torch.jit.script(M()), 'model.pt')

How to fix
  Load a TorchScript file only from a trusted source. To ship weights, save a plain
  state_dict (`torch.save(model.state_dict(), …)`) from a trusted environment or convert it
  to safetensors.",
    check: check,
    at_least: at_least,
});

/// Names listed in a message before the rest are counted.
const LISTED: usize = 8;

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let Some(code) = &ctx.ckpt.torchscript else {
        return;
    };
    let mut message = format!(
        "TorchScript archive: torch.jit.load compiles and runs the code it carries ({}); torch.load(weights_only=True) refuses it",
        list(&code.members)
    );
    if !code.setstate.is_empty() {
        message.push_str(&format!(
            "; __setstate__ is defined in {}, and runs while the file loads, before any user call",
            list(&code.setstate)
        ));
    }
    if !code.torch_setstate.is_empty() {
        message.push_str(&format!(
            "; the __setstate__ in {} is torch's own quantized convolution one (it sets attributes from the state and repacks weight and bias with ops.quantized.conv*_prepack)",
            list(&code.torch_setstate)
        ));
    }
    out.push(Draft {
        tensors: Vec::new(),
        storage: None,
        message,
        fix: "load it only from a trusted source; to ship weights, save a plain state_dict from a trusted environment or convert to safetensors".into(),
        payload: code.sha256.clone(),
        ..Default::default()
    });
}

/// Code that runs at load time is an error at any configured level.
fn at_least(ctx: &Context<'_>) -> Option<Severity> {
    let code = ctx.ckpt.torchscript.as_ref()?;
    (!code.setstate.is_empty()).then_some(Severity::Error)
}

/// The first names, then how many more.
fn list(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(LISTED)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > LISTED {
        text.push_str(&format!(" and {} more", names.len() - LISTED));
    }
    if text.is_empty() {
        text.push_str("no code members");
    }
    text
}

#[cfg(test)]
mod tests {
    use crate::audit::audit;
    use crate::config::Config;
    use crate::finding::Finding;
    use crate::options::Options;
    use crate::testing::{checkpoint, codes, findings, storage, tensor};
    use crate::Severity;
    use std::path::Path;
    use tensorplay_engine::torchscript_code::TorchScriptCode;
    use tensorplay_engine::{Checkpoint, Device};

    /// A one-tensor checkpoint read from a TorchScript archive with this code.
    fn archive(members: &[&str], setstate: &[&str]) -> Checkpoint {
        with_torch_setstate(members, setstate, &[])
    }

    /// [`archive`], with members whose `__setstate__` is torch's own.
    fn with_torch_setstate(members: &[&str], setstate: &[&str], own: &[&str]) -> Checkpoint {
        let s = storage(0, 4, "cpu");
        let mut ckpt = checkpoint(vec![tensor("w", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        let owned = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        ckpt.torchscript = Some(TorchScriptCode {
            members: owned(members),
            setstate: owned(setstate),
            torch_setstate: owned(own),
            sha256: String::new(),
        });
        ckpt
    }

    fn severities(found: &[Finding]) -> Vec<(&str, Severity)> {
        found
            .iter()
            .map(|f| (f.code.as_str(), f.severity))
            .collect()
    }

    #[test]
    fn a_torchscript_archive_warns_and_setstate_makes_it_an_error() {
        let mut plain = archive(&[], &[]);
        plain.torchscript = None;
        assert!(codes(&plain).is_empty());

        let found = findings(&archive(&["code/__torch__.py", "code/__torch__/m.py"], &[]));
        assert_eq!(severities(&found), [("TP504", Severity::Warning)]);
        let message = &found[0].message;
        assert!(
            message.contains(
                "the code it carries (code/__torch__.py, code/__torch__/m.py); torch.load(weights_only=True) refuses it"
            ) && !message.contains("__setstate__"),
            "{message}"
        );

        let members: Vec<String> = (0..10).map(|i| format!("code/__torch__/m{i}.py")).collect();
        let members: Vec<&str> = members.iter().map(String::as_str).collect();
        let found = findings(&archive(&members, &["code/__torch__/m3.py"]));
        assert_eq!(severities(&found), [("TP504", Severity::Error)]);
        let message = &found[0].message;
        assert!(
            message.contains("code/__torch__/m7.py and 2 more)")
                && message.ends_with(
                    "__setstate__ is defined in code/__torch__/m3.py, and runs while the file loads, before any user call"
                ),
            "{message}"
        );
    }

    #[test]
    fn torch_s_own_quantized_setstate_stays_at_the_configured_level() {
        let conv = "code/__torch__/torch/ao/nn/quantized/modules/conv.py";
        let found = findings(&with_torch_setstate(&[conv], &[], &[conv]));
        assert_eq!(severities(&found), [("TP504", Severity::Warning)]);
        assert!(
            found[0].message.ends_with(&format!(
                "; the __setstate__ in {conv} is torch's own quantized convolution one (it sets attributes from the state and repacks weight and bias with ops.quantized.conv*_prepack)"
            )) && !found[0].message.contains("runs while the file loads"),
            "{}",
            found[0].message
        );
        // A user's __setstate__ beside it is still an error.
        let user = "code/__torch__.py";
        let found = findings(&with_torch_setstate(&[user, conv], &[user], &[conv]));
        assert_eq!(severities(&found), [("TP504", Severity::Error)]);
    }

    /// The level configured is a floor for `__setstate__`, not a ceiling; `off` still
    /// turns the rule off.
    #[test]
    fn setstate_is_an_error_at_any_configured_level_but_off() {
        let with_level = |level: &str, ckpt: &Checkpoint| {
            let text = format!("[rules]\nTP504 = \"{level}\"\n");
            let config = Config::parse(Path::new("tensorplay.toml"), &text).expect("config");
            let found = audit(ckpt, "m.pt", &config, &Options::default(), None).findings;
            severities(&found)
                .into_iter()
                .map(|(code, severity)| (code.to_owned(), severity))
                .collect::<Vec<_>>()
        };
        let running = archive(&["code/__torch__.py"], &["code/__torch__.py"]);
        for level in ["info", "warning", "error"] {
            assert_eq!(
                with_level(level, &running),
                [("TP504".to_owned(), Severity::Error)],
                "{level}"
            );
        }
        assert!(with_level("off", &running).is_empty());
        assert_eq!(
            with_level("info", &archive(&["code/__torch__.py"], &[])),
            [("TP504".to_owned(), Severity::Info)]
        );
    }
}
