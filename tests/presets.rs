//! The allow presets of libraries that reload their own pickles with an allowlist, on real
//! files those libraries wrote (`fixtures/presets/`, by `fixtures/make_presets.py`, whose
//! `truth.json` holds each library's own reading of its file, the globals pickletools shows
//! and torch.load's answer): TP501 by default, as torch refuses them, the message naming the
//! library and its preset; nothing at all with the preset; one global more still TP501.

use crate::common::{
    audit_json as audit, audit_json_with, error_findings, global_names, inspect_json, read_json,
    stdout, strings, tensorplay, TempConfig,
};
use serde_json::Value;

const DIR: &str = "fixtures/presets";

fn truth() -> Value {
    read_json("fixtures/presets/truth.json")
}

/// Each fixture as (path, truth entry); `bad` picks the files with one global more.
fn files(truth: &Value, bad: bool) -> Vec<(String, Value)> {
    let files: Vec<(String, Value)> = truth["files"]
        .as_object()
        .expect("files")
        .iter()
        .filter(|(k, _)| k.contains("/bad/") == bad)
        .map(|(k, v)| (format!("{DIR}/{k}"), v.clone()))
        .collect();
    assert!(files.len() >= 5, "{} files", files.len());
    files
}

/// How TP501's message names the library that wrote `preset`'s files, at the version
/// the fixtures were made with.
fn library(truth: &Value, preset: &str) -> String {
    let (module, shown) = match preset {
        "transformers-trainer" => ("transformers", "transformers"),
        "pyg" => ("torch_geometric", "PyG"),
        other => (other, other),
    };
    let version = truth["versions"][module].as_str().expect("version");
    format!("{shown} {version}")
}

/// The globals TP501 reports in a JSON report, sorted, once each, and its messages.
fn tp501(report: &Value) -> (Vec<String>, Vec<String>) {
    let found: Vec<(String, String)> = error_findings(report)
        .concat()
        .into_iter()
        .filter(|(code, _)| code == "TP501")
        .collect();
    let mut names: Vec<String> = found
        .iter()
        .map(|(_, m)| {
            let after = m.split(" references ").nth(1).expect("references");
            after.split(':').next().expect("name").to_owned()
        })
        .collect();
    names.sort();
    names.dedup();
    (names, found.into_iter().map(|(_, m)| m).collect())
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// A config allowing `preset`, in a folder of its own per test (`test`): tests run at once in
/// one process, and a folder is removed when its config is dropped.
fn preset_config(test: &str, preset: &str) -> TempConfig {
    TempConfig::new(
        &format!("{test}-preset-{preset}"),
        &format!("[pickle]\nallow_presets = [\"{preset}\"]\n"),
    )
}

#[test]
fn every_global_is_named_where_pickletools_shows_it_and_torch_refuses_the_file() {
    let truth = truth();
    for (path, file) in files(&truth, false).into_iter().chain(files(&truth, true)) {
        let doc = inspect_json(&path);
        // The globals outside torch's allowlist, at the byte pickletools shows each.
        let expected: Vec<(String, u64)> = file["globals"]
            .as_array()
            .expect("globals")
            .iter()
            .filter(|g| {
                strings(&file["outside_torch_allowlist"])
                    .contains(&g["global"].as_str().unwrap().to_owned())
            })
            .map(|g| {
                (
                    g["global"].as_str().unwrap().to_owned(),
                    g["position"].as_u64().unwrap(),
                )
            })
            .collect();
        let names = global_names(&doc["unsafe_globals"]);
        let ours: Vec<(String, u64)> = names
            .iter()
            .zip(doc["unsafe_globals"].as_array().expect("unsafe_globals"))
            .map(|(n, g)| (n.clone(), g["position"].as_u64().expect("position")))
            .collect();
        assert_eq!(ours, expected, "{path}");
        assert!(doc["unsafe_globals"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["member"] == file["member"]));
        // torch.load(weights_only=True) refuses every one of them, for its first such global.
        assert_eq!(file["torch_load"]["loads"], false, "{path}");
        assert_eq!(doc["weights_only"]["loads"], false, "{path}");
        let theirs = file["torch_load"]["reason"].as_str().expect("reason");
        let reason = doc["weights_only"]["reason"].as_str().expect("reason");
        assert!(
            reason.starts_with(theirs),
            "{path}: torch {theirs:?}, ours {reason:?}"
        );
    }
}

#[test]
fn by_default_each_file_fails_naming_its_library_and_preset() {
    let truth = truth();
    for (path, file) in files(&truth, false) {
        let preset = file["preset"].as_str().expect("preset");
        // The library wrote it and read it back itself; torch alone refuses it.
        assert_eq!(file["library"]["loads"], true, "{path}");
        assert_eq!(file["in_preset"], true, "{path}");
        let report = audit(&path);
        let (names, messages) = tp501(&report);
        assert_eq!(
            names,
            sorted(strings(&file["outside_torch_allowlist"])),
            "{path}"
        );
        // TP501 is the only error: nothing else in these files is wrong.
        assert_eq!(error_findings(&report)[0].len(), messages.len(), "{path}");
        let named = library(&truth, preset);
        for message in &messages {
            assert!(
                message.contains(&format!("allow_presets = [\"{preset}\"]")),
                "{path}: {message}"
            );
            assert!(message.contains(&named), "{path}: {named}: {message}");
            assert!(!message.contains("allow_globals"), "{path}: {message}");
        }
    }
    // The Trainer's and accelerate's rng files name the same numpy globals: each is told both
    // presets.
    for path in [
        "fixtures/presets/transformers/rng_state.pth",
        "fixtures/presets/accelerate/random_states_0.pkl",
    ] {
        let (_, messages) = tp501(&audit(path));
        assert!(messages
            .iter()
            .all(|m| m.contains("[\"transformers-trainer\"]") && m.contains("[\"accelerate\"]")));
    }
}

#[test]
fn with_its_preset_each_file_passes_with_nothing_to_report() {
    let truth = truth();
    for (path, file) in files(&truth, false) {
        let preset = file["preset"].as_str().expect("preset");
        let config = preset_config("passes", preset);
        let out = tensorplay(&[
            "audit",
            "--format",
            "json",
            "--config",
            config.path(),
            &path,
        ]);
        assert_eq!(out.status.code(), Some(0), "{path}: {}", stdout(&out));
        let report: Value = serde_json::from_str(&stdout(&out)).expect("audit JSON");
        // No warning or info either: an ordinary file of that library.
        assert_eq!(
            report["files"][0]["findings"],
            serde_json::json!([]),
            "{path}"
        );
        assert_eq!(
            strings(&report["files"][0]["allowed_globals"]),
            sorted(strings(&file["outside_torch_allowlist"])),
            "{path}"
        );
    }
    // Another library's preset accepts none of it: timm's for torchao's file.
    let config = preset_config("other", "timm");
    let report = audit_json_with(
        &["--config", config.path()],
        "fixtures/presets/torchao/int8_tensor.pt",
    );
    assert_eq!(tp501(&report).0, ["torchao.quantization.Int8Tensor"]);
}

#[test]
fn one_global_outside_the_preset_still_fails_and_is_told_its_own_entry() {
    let truth = truth();
    for (path, file) in files(&truth, true) {
        let preset = file["preset"].as_str().expect("preset");
        assert_eq!(file["in_preset"], false, "{path}");
        // By default: every global reported, each with its own allow_globals entry, since no
        // preset holds them all.
        let (names, messages) = tp501(&audit(&path));
        assert_eq!(
            names,
            sorted(strings(&file["outside_torch_allowlist"])),
            "{path}"
        );
        assert!(names.contains(&"pathlib.PosixPath".to_owned()), "{path}");
        for message in &messages {
            assert!(!message.contains("allow_presets"), "{path}: {message}");
            assert!(message.contains("allow_globals = [\""), "{path}: {message}");
        }
        // With the preset: the output path alone, still an error.
        let config = preset_config("one-more", preset);
        let (names, messages) = tp501(&audit_json_with(&["--config", config.path()], &path));
        assert_eq!(names, ["pathlib.PosixPath"], "{path}");
        assert!(
            messages
                .iter()
                .all(|m| m.ends_with("allow_globals = [\"pathlib.PosixPath\"]")),
            "{path}: {messages:?}"
        );
        let out = tensorplay(&["audit", "--config", config.path(), &path]);
        assert_eq!(out.status.code(), Some(1), "{path}");
        // The library's own loader: refuses it, but PyG's, which warns and loads it again
        // with weights_only=False (what the preset cannot stand for).
        if preset == "pyg" {
            assert_eq!(file["library"]["loads"], true, "{path}");
            assert_eq!(file["library"]["weights_only"], false, "{path}");
            assert!(
                strings(&file["library"]["warnings"])[0].starts_with("Weights only load failed")
            );
        } else {
            assert_eq!(file["library"]["loads"], false, "{path}");
            let reason = file["library"]["reason"].as_str().expect("reason");
            assert!(reason.contains("PosixPath"), "{path}: {reason}");
        }
    }
}

#[test]
fn an_unknown_preset_lists_the_known_ones() {
    let bad = TempConfig::new(
        "unknown-library-preset",
        "[pickle]\nallow_presets = [\"transformers\"]\n",
    );
    let out = tensorplay(&[
        "audit",
        "--config",
        bad.path(),
        "fixtures/presets/timm/checkpoint-0.pth.tar",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let text = crate::common::stderr(&out);
    assert!(
        text.contains("'transformers' is not a preset (known: sklearn, transformers-trainer, accelerate, timm, torchao, pyg, torch-distributed)"),
        "{text}"
    );
}

/// torch 2.15.0's DTensor file (`fixtures/torch215/`, by `fixtures/make_torch215.py`): its
/// device mesh's ranks are named by attribute path, torch's default load refuses it as
/// tensorplay's model of it does, every global outside the allowlist (the mesh layouts
/// included) lies in the `torch-distributed` preset, which TP501 names and which passes it.
#[test]
fn the_torch_distributed_preset_passes_a_torch_2_15_dtensor_file() {
    let path = "fixtures/torch215/dtensor.pt";
    let truth = read_json(&format!("{path}.dtensor.json"));
    let doc = inspect_json(path);
    let composite = &doc["composites"][0];
    assert_eq!(composite["placements"], truth["placements"]);
    for (name, t) in truth["mesh_tensors"].as_object().expect("mesh tensors") {
        let got = doc["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .find(|g| g["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} in {}", doc["tensors"]));
        assert_eq!((&got["dtype"], &got["shape"]), (&t["dtype"], &t["shape"]));
    }
    let theirs = truth["torch_default_error"].as_str().expect("refusal");
    let ours = doc["weights_only"]["reason"].as_str().expect("reason");
    assert!(theirs.ends_with(ours), "torch {theirs:?}, ours {ours:?}");

    let (names, messages) = tp501(&audit(path));
    // Outside torch.load's table: the DTensor classes, not the mesh layouts `import torch`
    // registers as safe globals itself (torch 2.15).
    let registered = ["._MeshLayout", "._FlatLayout"];
    let outside: Vec<String> = strings(&truth["globals"])
        .into_iter()
        .filter(|g| g.starts_with("torch.distributed."))
        .filter(|g| !registered.iter().any(|r| g.ends_with(r)))
        .collect();
    assert_eq!(names, outside);
    assert!(
        strings(&truth["globals"])
            .iter()
            .any(|g| g.ends_with("._MeshLayout")),
        "the file names the mesh layout"
    );
    assert!(
        !names
            .iter()
            .any(|n| registered.iter().any(|r| n.ends_with(r))),
        "{names:?}"
    );
    assert!(
        messages
            .iter()
            .all(|m| m.contains("allow_presets = [\"torch-distributed\"]")),
        "{messages:?}"
    );
    let config = preset_config("torch215-dtensor", "torch-distributed");
    let out = tensorplay(&["audit", "--config", config.path(), path]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
