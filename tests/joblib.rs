//! joblib files against what joblib read from them (`fixtures/joblib/truth.json`, written by
//! `fixtures/make_joblib.py` with joblib 1.6.0 and scikit-learn 1.9.1): every array's name,
//! dtype, shape, bytes and offset; the globals joblib's unpickler resolves; the payloads as
//! TP501; the `sklearn` preset accepting the estimators and still refusing the payload;
//! compressed files of every compressor `joblib.load` picks by magic inflated within the
//! memory budget; discovery.

use crate::common::view_sha256;
use crate::common::{
    audit_json as audit, audit_json_with, error_findings, inspect_json as inspect, read_json, root,
    stdout, tensorplay, TempConfig, TempDir,
};
use serde_json::Value;
use tensorplay_engine::load::{self, ReadLimits};

const DIR: &str = "fixtures/joblib";

fn truth() -> Value {
    read_json("fixtures/joblib/truth.json")
}

/// The good files: those with arrays in the truth.
fn good(truth: &Value) -> Vec<(String, Value)> {
    truth
        .as_object()
        .expect("truth")
        .iter()
        .filter(|(_, v)| v.get("arrays").is_some())
        .map(|(k, v)| (format!("{DIR}/{k}"), v.clone()))
        .collect()
}

#[test]
fn every_array_reads_as_joblib_read_it() {
    let truth = truth();
    let files = good(&truth);
    assert!(files.len() >= 16, "{} files", files.len());
    let mut arrays = 0;
    for (path, file) in &files {
        let doc = inspect(path);
        assert_eq!(doc["format"], "joblib", "{path}");
        // joblib's arrays of a tensor dtype, in stream order; strings and objects are no tensor.
        // A ZF file's arrays are NumPy's own pickling, which joblib's plain ZipNumpyUnpickler
        // rebuilds: no NumpyArrayWrapper, no bytes inline, so (as in any plain pickle) no
        // tensor, and their globals named.
        let expected: Vec<&Value> = file["arrays"]
            .as_array()
            .expect("arrays")
            .iter()
            .filter(|a| a.get("sha256").is_some() && file.get("arrays_pickled_by").is_none())
            .collect();
        let tensors = doc["tensors"].as_array().expect("tensors");
        let names: Vec<&Value> = tensors.iter().map(|t| &t["name"]).collect();
        let wanted: Vec<&Value> = expected.iter().map(|a| &a["name"]).collect();
        assert_eq!(names, wanted, "{path}");
        let storages = doc["storages"].as_array().expect("storages");
        let ckpt = load::open(&root().join(path)).expect("reads");
        for ((t, a), read) in tensors.iter().zip(&expected).zip(&ckpt.tensors) {
            let name = format!("{path}: {}", a["name"]);
            let dtype = a["dtype"].as_str().expect("dtype");
            let ours = t["dtype"].as_str().expect("dtype");
            let same = match &dtype[1..] {
                "f2" => "float16",
                "f4" => "float32",
                "f8" => "float64",
                "i2" => "int16",
                "i4" => "int32",
                "i8" => "int64",
                "u1" => "uint8",
                "b1" => "bool",
                "c8" => "complex64",
                other => other,
            };
            assert_eq!(ours, same, "{name}");
            assert_eq!(t["shape"], a["shape"], "{name}");
            let storage = &storages[t["storage"].as_u64().expect("storage") as usize];
            assert_eq!(storage["nbytes"], a["nbytes"], "{name}");
            // Where joblib maps the array: the storage's key and its place in the file.
            if let Some(offset) = a.get("offset") {
                assert_eq!(storage["key"], offset.to_string(), "{name}");
                if storage["data_ptr"]["backend"] == "mmap" {
                    assert_eq!(storage["data_ptr"]["offset"], *offset, "{name}");
                }
            }
            assert_eq!(view_sha256(read), a["sha256"], "{name}");
            arrays += 1;
        }
        // Every global joblib's unpickler resolved is named (Python 2 names mapped).
        let mut named: Vec<String> = doc["unsafe_globals"]
            .as_array()
            .expect("globals")
            .iter()
            .map(|g| {
                format!(
                    "{}.{}",
                    g["module"].as_str().unwrap(),
                    g["name"].as_str().unwrap()
                )
            })
            .collect();
        named.sort();
        named.dedup();
        let mut resolved: Vec<String> = file["globals"]
            .as_array()
            .expect("globals")
            .iter()
            .map(|g| {
                let g = g.as_str().unwrap();
                g.replace("__builtin__.", "builtins.")
                    .replace("copy_reg.", "copyreg.")
            })
            .collect();
        // CPython's unpickler, reading the object array's nested pickle with the outer memo
        // as a plain pickle.load does, resolves one more (the differential harness checks it).
        if path.ends_with("object_array.joblib") {
            resolved.push("NumpyArrayWrapper.dtype".to_owned());
        }
        // Protocol 2's way of writing bytes is on the allowlist: resolved, never unsafe.
        resolved.retain(|g| g != "_codecs.encode");
        resolved.sort();
        assert_eq!(named, resolved, "{path}");
    }
    assert!(arrays >= 60, "{arrays} arrays");
}

/// Every compressor joblib.load picks by magic, the hard cases among them (a 1000-byte gzip
/// FEXTRA field, a 600-byte first opcode), is inflated within the memory budget: one that
/// inflates past the room left is refused naming it, not read whole.
#[test]
fn every_compressor_joblib_picks_by_magic_is_inflated_within_the_budget() {
    let truth = truth();
    let compressed: Vec<(String, Value)> = good(&truth)
        .into_iter()
        .filter(|(_, file)| file.get("compressor").is_some())
        .collect();
    let mut compressors: Vec<&str> = compressed
        .iter()
        .map(|(_, file)| file["compressor"].as_str().expect("compressor"))
        .collect();
    compressors.sort();
    compressors.dedup();
    assert_eq!(
        compressors,
        ["ZF", "bz2", "gzip", "lz4", "lzma", "xz", "zlib"]
    );
    for name in [
        "arrays_fextra.joblib.gz",
        "arrays_long_first_opcode.joblib.z",
    ] {
        assert!(
            compressed.iter().any(|(path, _)| path.ends_with(name)),
            "{name}"
        );
    }
    for (path, file) in &compressed {
        let size = file["size"].as_u64().expect("inflated size");
        let name = match file["compressor"].as_str().expect("compressor") {
            "ZF" => "ZF (joblib before 0.9.3)",
            other => other,
        };
        let read = |max_memory| {
            let limits = ReadLimits {
                max_memory,
                ..ReadLimits::default()
            };
            load::read_with(load::probe(&root().join(path)).expect("probe"), limits)
        };
        let e = read(size - 1).expect_err(path);
        assert!(e.over_budget(), "{path}: {e}");
        assert!(
            e.to_string().ends_with(&format!(
                "exceeds the memory budget (--max-memory): the read would hold {}, more than the \
                 {} allowed, for the inflated {name} stream (more than {} bytes)",
                tensorplay_engine::units::bytes_exactly(size),
                tensorplay_engine::units::bytes_exactly(size - 1),
                size - 1
            )),
            "{path}: {e}"
        );
        // With room for the stream (and what the read holds beside it), it reads.
        read(size + (1 << 20)).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

/// TP501 findings of a report's one file, as `module.name`.
fn tp501(report: &Value) -> Vec<String> {
    let mut names: Vec<String> = error_findings(report)[0]
        .iter()
        .filter(|(code, _)| code == "TP501")
        .map(|(_, m)| {
            let after = m.split(" references ").nth(1).expect("references");
            after.split(':').next().unwrap().to_owned()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn a_payload_is_tp501_at_the_byte_pickletools_shows() {
    let truth = truth();
    for name in [
        "payload.joblib",
        "payload.joblib.xz",
        "estimator_payload.joblib",
    ] {
        let path = format!("{DIR}/bad/{name}");
        let doc = inspect(&path);
        let shown = &truth["bad"][name]["globals"];
        let system = shown
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["global"] == "posix.system")
            .expect("pickletools shows posix.system");
        let ours = doc["unsafe_globals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["module"] == "posix" && g["name"] == "system")
            .expect("posix.system named");
        assert_eq!(ours["position"], system["position"], "{path}");
        assert!(tp501(&audit(&path)).contains(&"posix.system".to_owned()));
    }
}

#[test]
fn the_sklearn_preset_accepts_the_estimators_and_still_refuses_the_payload() {
    let config = TempConfig::new(
        "sklearn-preset",
        "[pickle]\nallow_presets = [\"sklearn\"]\n",
    );
    let report = |path: &str| audit_json_with(&["--config", config.path()], path);
    for name in [
        "linear_regression.joblib",
        "standard_scaler.joblib",
        "pipeline.joblib",
        "arrays.joblib",
        "arrays.joblib.z",
    ] {
        let path = format!("{DIR}/{name}");
        assert!(
            !tp501(&audit(&path)).is_empty(),
            "{path} without the preset"
        );
        assert_eq!(tp501(&report(&path)), Vec::<String>::new(), "{path}");
    }
    let path = format!("{DIR}/bad/estimator_payload.joblib");
    assert_eq!(tp501(&report(&path)), ["posix.system"], "{path}");
    // An object array: what plain pickle.load would resolve in its nested pickle is no
    // estimator, and stays TP501.
    let path = format!("{DIR}/object_array.joblib");
    assert_eq!(tp501(&report(&path)), ["NumpyArrayWrapper.dtype"], "{path}");
    let bad = TempConfig::new("unknown-preset", "[pickle]\nallow_presets = [\"torch\"]\n");
    let out = tensorplay(&[
        "audit",
        "--config",
        bad.path(),
        "fixtures/joblib/arrays.joblib",
    ]);
    let text = format!("{}{}", stdout(&out), crate::common::stderr(&out));
    assert!(
        text.contains(
            "'torch' is not a preset (known: sklearn, transformers-trainer, accelerate, timm, torchao, pyg, torch-distributed)"
        ),
        "{text}"
    );
}

#[test]
fn an_array_cut_short_is_refused_as_joblib_refuses_it() {
    let path = format!("{DIR}/bad/truncated_array.joblib");
    let e = load::open(&root().join(&path)).expect_err("cut");
    let message = e.to_string();
    assert!(message.contains("array at byte"), "{message}");
    assert!(message.contains("the array's 128 bytes"), "{message}");
    assert!(message.contains("EOF reading array data"), "{message}");
    let codes = error_findings(&audit(&path));
    assert!(
        codes[0].iter().any(|(code, _)| code == "TP502"),
        "{codes:?}"
    );
}

#[test]
fn the_nan_rule_fires_on_an_array_holding_a_nan() {
    let report = audit("fixtures/joblib/arrays.joblib");
    let findings = report["files"][0]["findings"].as_array().expect("findings");
    let tp401: Vec<&Value> = findings.iter().filter(|f| f["code"] == "TP401").collect();
    assert_eq!(tp401.len(), 1, "{findings:?}");
    assert!(
        tp401[0]["message"].as_str().unwrap().contains("nan"),
        "{tp401:?}"
    );
}

/// `.joblib` and `.pkl` are checkpoint extensions; compressed joblib files are found by
/// content, whatever their name.
#[test]
fn discovery_audits_joblib_files() {
    let dir = TempDir::new("joblib-discovery");
    std::fs::write(dir.0.join("model.joblib"), b"not a pickle").expect("write");
    std::fs::copy(
        root().join(DIR).join("arrays.joblib.gz"),
        dir.0.join("a.bin.gz"),
    )
    .expect("copy");
    std::fs::copy(
        root().join(DIR).join("linear_regression.joblib"),
        dir.0.join("m.pkl"),
    )
    .expect("copy");
    // Every other compressor, and a payload no name gives away.
    let found = [
        ("arrays.joblib.bz2", "a.bz2"),
        ("arrays.joblib.xz", "a.xz"),
        ("arrays.joblib.lzma", "a.lzma"),
        ("arrays.joblib.lz4", "a.lz4"),
        ("arrays_zfile.joblib", "a.zf"),
        ("arrays_fextra.joblib.gz", "b.gz"),
        ("arrays_long_first_opcode.joblib.z", "b.z"),
        ("bad/payload.joblib.xz", "model.joblib.xz"),
    ];
    for (from, to) in found {
        std::fs::copy(root().join(DIR).join(from), dir.0.join(to)).expect("copy");
    }
    let report = audit(dir.0.to_str().expect("utf-8"));
    let files = report["files"].as_array().expect("files");
    let formats: Vec<(&str, &str)> = files
        .iter()
        .map(|f| {
            let path = f["path"].as_str().unwrap();
            (
                path.rsplit('/').next().unwrap(),
                f["format"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(formats.len(), 3 + found.len(), "{formats:?}");
    assert!(formats.contains(&("a.bin.gz", "joblib")), "{formats:?}");
    assert!(formats.contains(&("m.pkl", "joblib")), "{formats:?}");
    for (_, to) in found {
        assert!(formats.contains(&(to, "joblib")), "{to}: {formats:?}");
    }
    let payload = files
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("/model.joblib.xz"))
        .expect("the payload is audited");
    let single = serde_json::json!({ "files": [payload] });
    assert!(
        tp501(&single).contains(&"posix.system".to_owned()),
        "{payload:#}"
    );
}
