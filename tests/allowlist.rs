//! Hostile names and TorchScript code (`fixtures/hostile/allowlist/`): each fixture fails the
//! gate naming what torch would run, and auditing it runs nothing. The truth is what torch
//! 2.9.1 itself did with each file (`fixtures/hostile/make_allowlist.py`).

use crate::common::{read_json, root, stderr, stdout, tensorplay};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

const TRUTH: &str = "fixtures/hostile/allowlist/truth.json";

/// A temp folder as the working directory, removed at drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "tensorplay-allowlist-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// Runs `tensorplay audit --ci-mode <fixture>` (default `--fail-on error`) from an empty
/// folder, which must stay empty; checks the exit code and that the report holds one finding
/// of `rule` at `severity`, and returns its message.
fn only_finding(fixture: &str, exit: i32, rule: &str, severity: &str) -> String {
    let dir = TempDir::new(fixture.rsplit('/').next().expect("file name"));
    let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(["audit", "--ci-mode"])
        .arg(root().join(fixture))
        .current_dir(&dir.0)
        .output()
        .expect("runs");
    let left: Vec<_> = std::fs::read_dir(&dir.0).expect("dir").collect();
    assert!(left.is_empty(), "{fixture}: auditing wrote {left:?}");
    let report: Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{fixture}: {e}: {}", stderr(&out)));
    assert_eq!(out.status.code(), Some(exit), "{fixture}: {report}");
    let found: Vec<[&str; 3]> = report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| ["code", "severity", "message"].map(|k| f[k].as_str().expect(k)))
        .collect();
    match found.as_slice() {
        [[code, level, message]] if (*code, *level) == (rule, severity) => (*message).to_owned(),
        _ => panic!("{fixture}: expected one {rule} {severity}, found {found:?}"),
    }
}

/// A pickle global torch resolves by its whole dotted name: TP501 names that name, where
/// it is, and nothing else fires.
#[test]
fn hostile_globals_fail_the_gate_naming_the_whole_dotted_name() {
    let truth = read_json(TRUTH);
    for fixture in [
        "fixtures/hostile/allowlist/stack_global_dotted.pt",
        "fixtures/hostile/allowlist/torch_class_outside_torchscript.pt",
    ] {
        let t = &truth[fixture];
        let g = &t["unsafe_global"];
        let full = format!(
            "{}.{}",
            g["module"].as_str().unwrap(),
            g["name"].as_str().unwrap()
        );
        // torch refuses it when restricted to its allowlist, naming no bypass.
        assert_eq!(t["torch_load_weights_only"]["ok"], false, "{fixture}");

        let message = only_finding(fixture, 1, "TP501", "error");
        let want = format!(
            "{} at byte {} references {full}: ",
            g["member"].as_str().unwrap(),
            g["position"]
        );
        assert!(message.starts_with(&want), "{fixture}: {message}");

        let out = tensorplay(&["inspect", "--format", "json", fixture]);
        assert_eq!(out.status.code(), Some(0), "{fixture}: {}", stderr(&out));
        let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        let mut expected = g.clone();
        expected.as_object_mut().unwrap().remove("opcode");
        assert_eq!(
            doc["unsafe_globals"],
            Value::Array(vec![expected]),
            "{fixture}"
        );
    }
}

/// torch 2.9.1 walks `build_intlist.__builtins__.get` attribute by attribute and runs the
/// payload; the old prefix match took the name for `build_intlist`.
#[test]
fn the_dotted_stack_global_is_one_torch_really_runs() {
    let t = &read_json(TRUTH)["fixtures/hostile/allowlist/stack_global_dotted.pt"];
    assert_eq!(t["unsafe_global"]["opcode"], "STACK_GLOBAL");
    assert_eq!(t["torch_load_unrestricted"]["payload_ran"], true);
    assert_eq!(t["torch_load_weights_only"]["payload_ran"], false);
    // Outside TorchScript, `__torch__` is a module Python tries to import.
    let t = &read_json(TRUTH)["fixtures/hostile/allowlist/torch_class_outside_torchscript.pt"];
    assert_eq!(
        t["torch_load_unrestricted"]["error"],
        "ModuleNotFoundError: No module named '__torch__'"
    );
    assert_eq!(
        t["torch_unsafe_globals"]["result"],
        serde_json::json!(["__torch__.Evil"])
    );
}

/// A `__setstate__` in TorchScript code runs inside `torch.jit.load`: TP504 is an error,
/// listing the code members and where `__setstate__` is defined.
#[test]
fn torchscript_with_setstate_fails_the_gate_as_an_error() {
    let fixture = "fixtures/hostile/allowlist/torchscript_setstate.pt";
    let t = &read_json(TRUTH)[fixture];
    // Saved with loads = 0: torch.jit.load ran `__setstate__` once.
    assert_eq!(t["torch_jit_load"]["result"]["loads"], 1);
    assert!(t["torch_load_weights_only"]["error"]
        .as_str()
        .unwrap()
        .contains("Cannot use ``weights_only=True`` with TorchScript archives"));

    let message = only_finding(fixture, 1, "TP504", "error");
    let names = |key: &str| -> Vec<String> {
        t[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        message.contains(&format!(
            "the code it carries ({})",
            names("code_members").join(", ")
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "__setstate__ is defined in {}, and runs while the file loads",
            names("setstate_members").join(", ")
        )),
        "{message}"
    );
}

/// A TorchScript archive without `__setstate__` warns, and passes the default gate.
#[test]
fn torchscript_without_setstate_warns_only() {
    let message = only_finding("fixtures/pytorch/torchscript.pt", 0, "TP504", "warning");
    assert!(
        message.contains("(code/__torch__.py, code/__torch__/torch/nn/modules/linear.py)")
            && !message.contains("__setstate__"),
        "{message}"
    );
}
