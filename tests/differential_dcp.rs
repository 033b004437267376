//! torch.distributed.checkpoint directories that `dcp.load` reads differently from a reader
//! that takes the first of two equal keys, or that hold bytes `dcp.load` never reads
//! (`fixtures/hostile/make_differential_dcp.py`; `truth.json` records what the real loader
//! read from each). tensorplay refuses each, naming the key, the file or the bytes, and reads
//! the clean copy as the loader does.

use crate::common::{audit_json as audit, read_json, root, stderr, stdout, tensorplay, TempDir};
use serde_json::Value;

const DIR: &str = "fixtures/hostile/differential/dcp";

#[test]
fn each_differential_copy_is_refused_naming_what_differs() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let cases = truth["cases"].as_object().expect("cases");
    assert_eq!(cases.len(), 7);
    for (name, case) in cases {
        let dir = format!("{DIR}/{name}");
        let report = audit(&dir);
        let files = report["files"].as_array().expect("files");
        assert_eq!(files.len(), 1, "{name}: {files:?}");
        let findings = files[0]["findings"].as_array().expect("findings");
        assert_eq!(findings.len(), 1, "{name}: {findings:?}");
        let finding = &findings[0];
        assert_eq!(finding["code"], case["expect"], "{name}: {finding}");
        assert_eq!(finding["severity"], "error", "{name}");
        let text = finding["message"].as_str().expect("message");
        let wanted = case["message"].as_str().expect("expected message");
        assert!(text.contains(wanted), "{name}: {text}");
        if case["expect"] == "TP502" {
            // A repeated key names the file and the member it is in.
            assert!(
                text.starts_with(&format!("{dir}/.metadata: .metadata: ")),
                "{name}: {text}"
            );
        }
        // Never a pass: the gate fails.
        let out = tensorplay(&["audit", &dir]);
        assert_eq!(out.status.code(), Some(1), "{name}");
    }
}

#[test]
fn where_the_loader_reads_another_record_it_is_the_last_key_that_moved() {
    // The truth itself: these copies make dcp.load read a range or file the first pair does
    // not name, which is why taking the first was wrong.
    let truth = read_json(&format!("{DIR}/truth.json"));
    let clean = &truth["clean"]["reads"]["model.embed.weight"][0];
    for name in [
        "dup_offset_length",
        "dup_storage_data",
        "dup_relative_path",
        "dup_index",
    ] {
        let read = &truth["cases"][name]["reads"]["model.embed.weight"][0];
        assert_ne!(read, clean, "{name}");
    }
    let opened = &truth["cases"]["dup_relative_path"]["files_opened"];
    assert!(opened.as_array().unwrap().contains(&"__1_0.distcp".into()));
}

#[test]
fn the_clean_copy_reads_what_the_loader_reads_and_passes() {
    let dir = format!("{DIR}/clean");
    let truth = read_json(&format!("{DIR}/truth.json"));
    let report = audit(&dir);
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["format"], "torch-distributed");
    assert_eq!(files[0]["findings"], serde_json::json!([]));
    let out = tensorplay(&["inspect", "--format", "json", &dir]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let storages = doc["storages"].as_array().unwrap();
    let tensors = doc["tensors"].as_array().unwrap();
    for (fqn, reads) in truth["clean"]["reads"].as_object().unwrap() {
        let [read] = reads.as_array().unwrap().as_slice() else {
            panic!("{fqn}: one range");
        };
        let Some(tensor) = tensors.iter().find(|t| t["name"] == *fqn) else {
            continue; // a bytes item without tensors
        };
        let storage = &storages[tensor["storage"].as_u64().unwrap() as usize];
        let ptr = &storage["data_ptr"];
        assert_eq!(
            ptr["file"].as_str().unwrap(),
            format!("{dir}/{}", read["file"].as_str().unwrap())
        );
        let (start, length) = (
            read["offset"].as_u64().unwrap(),
            read["length"].as_u64().unwrap(),
        );
        let offset = ptr["offset"].as_u64().unwrap();
        let nbytes = storage["nbytes"].as_u64().unwrap();
        assert!(
            start < offset && offset + nbytes <= start + length,
            "{fqn}: {offset}"
        );
        let loaded = &truth["clean"]["loaded"][fqn.as_str()];
        assert_eq!(tensor["dtype"], loaded["dtype"], "{fqn}");
    }
}

#[test]
fn an_empty_distcp_file_no_item_names_holds_nothing_to_miss() {
    // A writer thread given no items leaves an empty file: nothing in it goes unread.
    let temp = TempDir::new("dcp-empty-part");
    let dir = temp.0.join("ckpt");
    std::fs::create_dir_all(&dir).unwrap();
    for name in [".metadata", "__0_0.distcp"] {
        std::fs::copy(root().join(DIR).join("clean").join(name), dir.join(name)).unwrap();
    }
    std::fs::write(dir.join("__0_1.distcp"), b"").unwrap();
    let report = audit(dir.to_str().unwrap());
    assert_eq!(report["files"][0]["findings"], serde_json::json!([]));
    std::fs::write(dir.join("__0_1.distcp"), b"\0").unwrap();
    let report = audit(dir.to_str().unwrap());
    let text = report["files"][0]["findings"][0]["message"]
        .as_str()
        .unwrap();
    assert!(
        text.contains("__0_1.distcp (1 bytes) is named by no item"),
        "{text}"
    );
}
