//! `torch.export` archives (`.pt2`) against torch's own reading (`torch.export.load`):
//! the three layouts torch 2.9.1 loads, a tied weight, and the broken archives it refuses.

use crate::common::{read_json, root, stderr, stdout, tensorplay};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tensorplay_engine::{load, DType, Format, Tensor};

const TRUTH: &str = "fixtures/pt2/truth.json";
const EXPECTED_BAD: &str = "fixtures/pt2/bad/expected.json";

fn archives() -> Vec<(String, Vec<Value>)> {
    let truth = read_json(TRUTH);
    let archives = truth["archives"].as_object().expect("archives");
    assert_eq!(
        archives.len(),
        4,
        "the three layouts and a tie: {:?}",
        archives.keys()
    );
    archives
        .iter()
        .map(|(path, tensors)| (path.clone(), tensors.as_array().expect("tensors").clone()))
        .collect()
}

/// `inspect --format json` gives each tensor as torch rebuilds it, in torch's order.
#[test]
fn inspect_json_matches_torch_export_load() {
    for (path, expected) in archives() {
        let out = tensorplay(&["inspect", "--format", "json", &path]);
        assert_eq!(out.status.code(), Some(0), "{path}: {}", stderr(&out));
        let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        assert_eq!(doc["format"], "pt2", "{path}");
        assert_eq!(doc["unsafe_globals"], serde_json::json!([]), "{path}");
        let got = doc["tensors"].as_array().expect("tensors");
        let names = |v: &[Value]| -> Vec<String> {
            v.iter()
                .map(|t| t["name"].as_str().expect("name").to_owned())
                .collect()
        };
        assert_eq!(names(got), names(&expected), "{path}");
        for (got, want) in got.iter().zip(&expected) {
            let name = &want["name"];
            for field in [
                "dtype",
                "shape",
                "strides",
                "storage_offset",
                "device",
                "requires_grad",
                "is_parameter",
            ] {
                assert_eq!(got[field], want[field], "{path}: {name}: {field}");
            }
            let storage = &doc["storages"][got["storage"].as_u64().expect("storage") as usize];
            assert_eq!(storage["nbytes"], want["storage_nbytes"], "{path}: {name}");
        }
    }
}

/// Each tensor's storage holds the bytes torch reads, and its view the values torch gives.
#[test]
fn storages_hold_the_bytes_and_values_torch_reads() {
    for (path, expected) in archives() {
        let ckpt = load::open(&root().join(&path)).expect(&path);
        assert_eq!(ckpt.format, Format::Pt2, "{path}");
        assert_eq!(ckpt.tensors.len(), expected.len(), "{path}");
        for (tensor, want) in ckpt.tensors.iter().zip(&expected) {
            let name = tensor.name();
            assert_eq!(want["name"], name, "{path}");
            let imp = tensor.tensor_impl();
            imp.verify_data_ptr_consistency(name).expect("consistent");
            let bytes = imp.storage().data_ptr().bytes().expect("host bytes");
            assert_eq!(
                format!("{:x}", Sha256::digest(bytes)),
                want["storage_sha256"].as_str().expect("sha"),
                "{path}: {name}"
            );
            assert_eq!(values(tensor, bytes), want["values"], "{path}: {name}");
        }
    }
}

/// The view's elements in row-major order, read through its strides (float32 and int64: the
/// fixture's dtypes).
fn values(tensor: &Tensor, storage: &[u8]) -> Value {
    let imp = tensor.tensor_impl();
    let layout = imp.layout();
    let (sizes, strides) = (layout.sizes(), layout.strides());
    let numel: u64 = sizes.iter().product();
    let element = |index: u64| -> Value {
        let mut rest = index;
        let mut at = layout.storage_offset();
        for (size, stride) in sizes.iter().zip(strides).rev() {
            at += (rest % size) * stride;
            rest /= size;
        }
        let start = at as usize;
        match imp.dtype() {
            DType::Float32 => {
                let b = storage.get(start * 4..start * 4 + 4).expect("in bounds");
                let v = f32::from_le_bytes(b.try_into().expect("4 bytes"));
                serde_json::json!(f64::from(v))
            }
            DType::Int64 => {
                let b = storage.get(start * 8..start * 8 + 8).expect("in bounds");
                serde_json::json!(i64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            other => panic!("{}: no decoder for {other}", tensor.name()),
        }
    };
    Value::Array((0..numel).map(element).collect())
}

/// The new layout's storages are the raw members, borrowed in place from the mapped file (so
/// a scan reads the file itself); the older layouts' come from the nested `torch.save` archives.
#[test]
fn raw_members_are_storages_read_in_place() {
    let path = "fixtures/pt2/tiny.pt2";
    let file = std::fs::read(root().join(path)).expect("file");
    let out = tensorplay(&["inspect", "--format", "json", path]);
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let storages = doc["storages"].as_array().expect("storages");
    let keys: Vec<&str> = storages.iter().filter_map(|s| s["key"].as_str()).collect();
    assert_eq!(
        keys,
        [
            "data/weights/weight_0",
            "data/weights/weight_1",
            "data/weights/weight_2",
            "data/constants/tensor_0",
        ]
    );
    let truth = archives();
    let (_, tensors) = truth.iter().find(|(p, _)| p == path).expect("tiny truth");
    for (storage, want) in storages.iter().zip(tensors) {
        let ptr = &storage["data_ptr"];
        assert_eq!(ptr["backend"], "mmap", "{ptr}");
        assert_eq!(ptr["file"], path, "{ptr}");
        let start = ptr["offset"].as_u64().expect("offset") as usize;
        let len = storage["nbytes"].as_u64().expect("nbytes") as usize;
        let bytes = file.get(start..start + len).expect("inside the file");
        assert_eq!(
            format!("{:x}", Sha256::digest(bytes)),
            want["storage_sha256"].as_str().expect("sha"),
            "{}",
            storage["key"]
        );
    }
    let out = tensorplay(&["audit", "--format", "json", path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let report = &doc["files"][0];
    assert_eq!(report["format"], "pt2");
    assert_eq!(report["tensors"], 4);
    let checked = report["checked"].as_array().expect("checked");
    assert!(checked.iter().any(|c| c == "TP401"), "{checked:?}");
    assert_eq!(doc["summary"]["errors"], 0);

    let legacy = load::open(&root().join("fixtures/pt2/legacy_layout.pt2")).expect("legacy");
    // Both nested archives number their storages from 0: keys name the member too.
    let keys: Vec<&str> = legacy.storages.iter().map(|s| s.key()).collect();
    assert_eq!(
        keys,
        [
            "data/weights/model.pt/0",
            "data/weights/model.pt/1",
            "data/weights/model.pt/2",
            "data/constants/model.pt/0",
        ]
    );
    let sources: Vec<String> = legacy
        .storages
        .iter()
        .map(|s| match s.data_ptr().owner() {
            tensorplay_engine::Owner::Host { buffer, .. } => {
                buffer.source().to_string_lossy().into_owned()
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert!(
        sources.iter().all(
            |s| s.ends_with("legacy_layout.pt2/archive/data/weights/model.pt")
                || s.ends_with("legacy_layout.pt2/archive/data/constants/model.pt")
        ),
        "{sources:?}"
    );

    // Before torch 2.7: no folder, the payloads at the root.
    let pre27 = load::open(&root().join("fixtures/pt2/pre27_layout.pt2")).expect("pre27");
    let keys: Vec<&str> = pre27.storages.iter().map(|s| s.key()).collect();
    assert_eq!(
        keys,
        [
            "serialized_state_dict.pt/0",
            "serialized_state_dict.pt/1",
            "serialized_state_dict.pt/2",
            "serialized_constants.pt/0",
        ]
    );
}

/// Archives torch refuses are refused with TP502, naming the file and the member at fault.
#[test]
fn broken_archives_are_refused_naming_the_member() {
    let expected = read_json(EXPECTED_BAD);
    let expected = expected.as_object().expect("expected verdicts");
    let refused: Vec<_> = expected
        .iter()
        .filter(|(_, w)| w["code"] == "TP502")
        .collect();
    assert_eq!(refused.len(), 3);
    for (path, want) in refused {
        let out = tensorplay(&["audit", "--format", "json", path]);
        assert_ne!(out.status.code(), Some(0), "{path}: passed");
        let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        let findings = doc["files"][0]["findings"].as_array().expect("findings");
        let codes: Vec<&str> = findings.iter().filter_map(|f| f["code"].as_str()).collect();
        assert_eq!(codes, [want["code"].as_str().expect("code")], "{path}");
        let message = findings[0]["message"].as_str().expect("message");
        let part = want["part"].as_str().expect("part");
        assert!(
            message.starts_with(&format!("{path}: {part}: ")),
            "{path}: {message}"
        );
        let err = stderr(&tensorplay(&["inspect", path]));
        assert_eq!(err.lines().count(), 1, "{path}: {err}");
        assert!(err.contains(part), "{path}: {err}");
    }
}

/// Example inputs are unpickled by `torch.export.load` (`weights_only=False`): a global
/// there is found and named with the nested member, the weights still read, nothing run.
#[test]
fn a_payload_in_the_example_inputs_is_found_not_run() {
    let expected = read_json(EXPECTED_BAD);
    let (path, want) = expected
        .as_object()
        .expect("expected verdicts")
        .iter()
        .find(|(_, w)| w["code"] == "TP501")
        .expect("the payload archive");
    let dir = std::env::temp_dir().join(format!("tensorplay-pt2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(["audit", "--format", "json"])
        .arg(root().join(path))
        .current_dir(&dir)
        .output()
        .expect("runs");
    assert_ne!(out.status.code(), Some(0), "{path}: passed");
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let report = &doc["files"][0];
    assert_eq!(report["tensors"], 4, "{path}");
    let findings = report["findings"].as_array().expect("findings");
    let payload: Vec<&str> = findings
        .iter()
        .filter(|f| f["code"] == "TP501")
        .filter_map(|f| f["message"].as_str())
        .collect();
    let (part, global) = (
        want["part"].as_str().expect("part"),
        want["global"].as_str().expect("global"),
    );
    assert_eq!(payload.len(), 1, "{findings:?}");
    assert!(
        payload[0].contains(&format!("{part}/")) && payload[0].contains(global),
        "{}",
        payload[0]
    );
    assert_eq!(
        std::fs::read_dir(&dir).expect("dir").count(),
        0,
        "the audit wrote into the working directory"
    );
    std::fs::remove_dir_all(&dir).ok();
}
