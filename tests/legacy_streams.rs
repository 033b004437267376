//! Hostile legacy files (`fixtures/hostile/legacy/`, from `fixtures/hostile/make_legacy.py`):
//! a payload in each of a legacy stream's five pickles, in the old tar format's members, and in
//! tar/stream polyglots. torch 2.9.1 ran each payload (its truth says so); the gate must fail
//! every file, name each unsafe global where it lies, and run nothing itself.

use crate::common::{read_json, root, stderr, stdout};
use std::path::Path;
use std::process::Command;
use tensorplay_engine::load::from_buffer;
use tensorplay_engine::{ErrorKind, HostBuffer};

const DIR: &str = "fixtures/hostile/legacy";

/// How the gate must fail each fixture: the one code its findings carry, and for a refusal
/// (TP502) the reason it gives.
fn expected(fixture: &str) -> (&'static str, Option<&'static str>) {
    match fixture {
        "magic_number_mismatch.pt" => ("TP502", Some("magic number is not PyTorch's")),
        "protocol_version_mismatch.pt" => ("TP502", Some("legacy protocol version is not 1001")),
        // The payload runs before the first pickle's value, the magic number: torch.load
        // compares the value only, so the file is legacy, read as such, and the payload named.
        "polyglot_tar_fallback.pt" => ("TP502", Some("runs past the end of the file")),
        f if f.starts_with("tar_") || f.starts_with("polyglot_") => {
            ("TP502", Some("old PyTorch tar (torch < 0.4)"))
        }
        _ => ("TP501", None),
    }
}

/// `tensorplay audit --ci-mode` on one fixture, run from an empty directory.
fn audit_in(dir: &Path, fixture: &str) -> (Option<i32>, Vec<(String, String)>) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(["audit", "--ci-mode"])
        .arg(root().join(DIR).join(fixture))
        .current_dir(dir)
        .output()
        .expect("runs");
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{fixture}: {e}: {}", stderr(&out)));
    let findings = doc["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let text = |k: &str| f[k].as_str().expect(k).to_owned();
            (text("code"), text("message"))
        })
        .collect();
    (out.status.code(), findings)
}

#[test]
fn every_fixture_fails_the_gate_naming_each_global_and_runs_nothing() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let fixtures = truth.as_object().expect("truth by fixture");
    assert_eq!(fixtures.len(), 14);
    let dir = std::env::temp_dir().join(format!("tensorplay-legacy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (fixture, t) in fixtures {
        // What torch did: it ran every payload but the one in the tar's sys_info member,
        // which torch 2.9.1 no longer reads.
        let ran = ["torch_load", "torch_load_bytesio"]
            .iter()
            .any(|k| t[k]["payload_ran"] == true);
        let unread = matches!(fixture.as_str(), "tar_clean.pt" | "tar_payload_sys_info.pt");
        assert_eq!(ran, !unread, "{fixture}: what torch did");
        assert_eq!(t["torch_load_weights_only"]["payload_ran"], false);
        let globals = t["unsafe_globals"].as_array().expect("globals");

        let cwd = dir.join(fixture);
        std::fs::create_dir_all(&cwd).expect("working directory");
        let (code, mut findings) = audit_in(&cwd, fixture);
        assert_eq!(code, Some(1), "{fixture}: {findings:?}");
        let (want, reason) = expected(fixture);
        // A refused file's globals are also TP501 findings of their own: CPython ran them
        // before the opcode it refused.
        let refused_globals: Vec<String> = findings
            .iter()
            .filter(|(c, _)| want == "TP502" && c == "TP501")
            .map(|(_, m)| m.clone())
            .collect();
        findings.retain(|(c, _)| want != "TP502" || c != "TP501");
        assert!(
            !findings.is_empty() && findings.iter().all(|(c, _)| c == want),
            "{fixture}: {findings:?}"
        );
        if let Some(reason) = reason {
            assert_eq!(findings.len(), 1, "{fixture}: {findings:?}");
            assert!(findings[0].1.contains(reason), "{fixture}: {findings:?}");
        }
        // Each global torch's reading would meet, where the script's own scan found it.
        assert_eq!(
            findings
                .iter()
                .map(|(_, m)| m.matches("posix.system").count())
                .sum::<usize>(),
            globals.len(),
            "{fixture}: {findings:?}"
        );
        for g in globals {
            let field = |k: &str| g[k].to_string().trim_matches('"').to_owned();
            let (member, position) = (field("member"), field("position"));
            let (module, name) = (field("module"), field("name"));
            let named = if want == "TP501" {
                format!("{member} at byte {position} references {module}.{name}:")
            } else {
                format!("{module}.{name} ({member} at byte {position})")
            };
            assert!(
                findings.iter().any(|(_, m)| m.contains(&named)),
                "{fixture}: '{named}' not in {findings:?}"
            );
            if want == "TP502" {
                let own = format!("{member} at byte {position} references {module}.{name}:");
                assert!(
                    refused_globals.iter().any(|m| m.contains(&own)),
                    "{fixture}: no TP501 '{own}' in {refused_globals:?}"
                );
            }
        }
    }
    // Each run had its own empty working directory: a payload would have left its marker.
    let written: Vec<String> = fixtures
        .keys()
        .filter(|f| std::fs::read_dir(dir.join(f)).map_or(true, |mut d| d.next().is_some()))
        .cloned()
        .collect();
    assert!(
        written.is_empty(),
        "files written while auditing {written:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_payload_in_any_legacy_pickle_is_reported_under_that_pickle() {
    for (fixture, member) in [
        ("payload_magic_number.pt", "legacy pickle 1 (magic_number)"),
        (
            "payload_protocol_version.pt",
            "legacy pickle 2 (protocol_version)",
        ),
        ("payload_sys_info.pt", "legacy pickle 3 (sys_info)"),
        ("payload_obj.pt", "legacy pickle 4 (obj)"),
        ("payload_storage_keys.pt", "legacy pickle 5 (storage_keys)"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
            .args(["inspect", "--format", "json", &format!("{DIR}/{fixture}")])
            .current_dir(root())
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(0), "{fixture}: {}", stderr(&out));
        let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        // The file reads as the clean one does: torch loaded {'weight': [1, 2, 3, 4]}.
        assert_eq!(doc["format"], "pytorch-legacy");
        assert_eq!(doc["tensors"][0]["name"], "weight");
        assert_eq!(doc["tensors"][0]["shape"], serde_json::json!([4]));
        let globals = doc["unsafe_globals"].as_array().expect("unsafe_globals");
        assert_eq!(globals.len(), 1, "{fixture}: {globals:?}");
        assert_eq!(globals[0]["member"], member, "{fixture}");
        assert_eq!(globals[0]["module"], "posix");
    }
}

#[test]
fn truncated_or_damaged_tar_and_polyglot_files_are_refused() {
    for fixture in ["tar_payload_storages.pt", "polyglot_tar_legacy.pt"] {
        let bytes = std::fs::read(root().join(DIR).join(fixture)).expect("fixture");
        let read = |b: Vec<u8>| from_buffer(HostBuffer::from_vec(fixture, b));
        for len in 0..bytes.len() {
            let e = read(bytes[..len].to_vec()).expect_err("a prefix");
            assert_eq!(e.kind(), ErrorKind::Corrupt, "{fixture}: {len} bytes: {e}");
        }
        // Every byte of the headers and the member records, flipped: still refused, since no
        // tar file is ever read and no flip turns one into a complete legacy stream.
        for at in 0..bytes.len().min(4096) {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x41;
            let e = read(flipped).expect_err("a flipped byte");
            assert_eq!(
                e.kind(),
                ErrorKind::Corrupt,
                "{fixture}: byte {at} flipped: {e}"
            );
        }
    }
}

#[test]
fn a_tar_that_is_also_a_stream_is_refused_naming_the_globals_of_both_readings() {
    let fixture = "polyglot_tar_legacy.pt";
    let t = &read_json(&format!("{DIR}/truth.json"))[fixture];
    // torch.load(path) read the tar, torch.load(BytesIO) the stream: different tensors.
    assert_ne!(t["torch_load"]["loaded"], t["torch_load_bytesio"]["loaded"]);
    let members: Vec<&str> = t["unsafe_globals"]
        .as_array()
        .expect("globals")
        .iter()
        .map(|g| g["member"].as_str().expect("member"))
        .collect();
    assert_eq!(members, ["legacy pickle 4 (obj)", "tar member 'pickle'"]);
    let bytes = std::fs::read(root().join(DIR).join(fixture)).expect("fixture");
    let err = from_buffer(HostBuffer::from_vec(fixture, bytes)).expect_err("refused");
    let text = err.to_string();
    for member in members {
        assert!(text.contains(&format!("({member} at byte ")), "{text}");
    }
}
