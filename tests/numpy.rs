//! NumPy's `.npy` and `.npz` files against what numpy read from them
//! (`fixtures/numpy/truth.json`, written by `fixtures/make_numpy.py`): every good file's
//! tensors, layouts, storages and bytes; every refused file's error, its TP code and its
//! message; the object arrays' globals as TP501.

use crate::common::view_sha256;
use crate::common::{
    audit_json as audit, corrupt_refusal, error_findings, inspect_json as inspect, read_json, root,
    shape_of, stdout, tensorplay, TempDir,
};
use serde_json::Value;
use tensorplay_engine::{load, Error};

const TRUTH: &str = "fixtures/numpy/truth.json";

fn truth() -> Value {
    read_json(TRUTH)
}

/// C-order strides, or Fortran's (the first index fastest), as numpy lays out the data.
fn strides(shape: &[u64], fortran: bool) -> Vec<u64> {
    let mut strides = vec![1u64; shape.len()];
    let order: Vec<usize> = match fortran {
        false => (0..shape.len()).rev().collect(),
        true => (0..shape.len()).collect(),
    };
    for pair in order.windows(2) {
        let (inner, outer) = (pair[0], pair[1]);
        strides[outer] = strides[inner] * shape[inner].max(1);
    }
    strides
}

#[test]
fn every_good_file_reads_as_numpy_read_it() {
    let truth = truth();
    let files = truth["files"].as_object().expect("files");
    assert!(files.len() >= 15, "{} files", files.len());
    let mut arrays = 0;
    for (path, file) in files {
        let doc = inspect(path);
        assert_eq!(doc["format"], file["format"], "{path}");
        let expected = file["arrays"].as_array().expect("arrays");
        let tensors = doc["tensors"].as_array().expect("tensors");
        let storages = doc["storages"].as_array().expect("storages");
        let names: Vec<&Value> = tensors.iter().map(|t| &t["name"]).collect();
        let wanted: Vec<&Value> = expected.iter().map(|a| &a["name"]).collect();
        assert_eq!(names, wanted, "{path}: names in numpy's order");
        let ckpt = load::open(&root().join(path)).expect("reads");
        for ((t, a), read) in tensors.iter().zip(expected).zip(&ckpt.tensors) {
            let name = format!("{path}: {}", a["name"]);
            assert_eq!(t["dtype"], a["dtype"], "{name}");
            assert_eq!(t["shape"], a["shape"], "{name}");
            let shape: Vec<u64> = serde_json::from_value(a["shape"].clone()).expect("shape");
            let fortran = a["fortran_order"].as_bool().expect("fortran_order");
            assert_eq!(
                t["strides"],
                serde_json::json!(strides(&shape, fortran)),
                "{name}"
            );
            // numpy's own strides, where an array has more than one element to stride over.
            if !a["strides"].is_null() {
                assert_eq!(t["strides"], a["strides"], "{name}");
            }
            assert_eq!(t["storage_offset"], 0, "{name}");
            let storage = &storages[t["storage"].as_u64().expect("storage") as usize];
            assert_eq!(storage["nbytes"], a["nbytes"], "{name}");
            assert_eq!(storage["key"], a["name"], "{name}");
            // Mapped in place at numpy's data offset, unless swapped or inflated.
            let swapped = a["descr"].as_str().unwrap().starts_with('>');
            let inflated = a["compressed"] == true;
            let ptr = &storage["data_ptr"];
            if swapped || inflated {
                assert_eq!(ptr["backend"], "heap", "{name}");
            } else {
                let member_start = a["member_data_start"].as_u64().unwrap_or(0);
                let offset = member_start + a["offset"].as_u64().expect("offset");
                assert_eq!(ptr["backend"], "mmap", "{name}");
                assert_eq!(ptr["offset"], offset, "{name}");
            }
            // The bytes are numpy's elements, little-endian, in storage order.
            assert_eq!(view_sha256(read), a["sha256"], "{name}");
            arrays += 1;
        }
        assert!(doc["unsafe_globals"].as_array().is_none_or(Vec::is_empty));
        // No torch.load verdict: numpy's files are not torch.load's.
        assert!(doc.get("weights_only").is_none(), "{path}");
    }
    assert!(arrays >= 40, "{arrays} arrays");
}

#[test]
fn a_dtype_of_every_kind_and_both_byte_orders_reads_as_the_same_values() {
    let ckpt = load::open(&root().join("fixtures/numpy/dtypes.npz")).expect("reads");
    assert_eq!(ckpt.format.name(), "numpy-npz");
    // 14 dtypes, and the 11 wider than a byte once more, big-endian.
    assert_eq!(ckpt.tensors.len(), 25);
    let mut compared = 0;
    for t in &ckpt.tensors {
        let Some(little) = t.name().strip_suffix("_be") else {
            continue;
        };
        let twin = ckpt
            .tensors
            .iter()
            .find(|u| u.name() == little)
            .expect("little-endian twin");
        assert_eq!(t.tensor_impl().dtype(), twin.tensor_impl().dtype());
        assert_eq!(
            t.tensor_impl().view_bytes(),
            twin.tensor_impl().view_bytes(),
            "{}",
            t.name()
        );
        compared += 1;
    }
    assert_eq!(compared, 11);
}

#[test]
fn the_text_output_shows_the_fortran_strides() {
    let out = tensorplay(&["inspect", "fixtures/numpy/float64_fortran.npy"]);
    let text = stdout(&out);
    assert!(
        text.starts_with(
            "fixtures/numpy/float64_fortran.npy: numpy-npy, 1 tensor, 1 storage, 48 B"
        ),
        "{text}"
    );
    assert!(
        text.contains("<root>  float64  [2, 3]  [1, 2]   0       0        cpu     no    no     no"),
        "{text}"
    );
}

/// Each refused file: the error kind, the TP code the audit gives it, and what its message
/// must say. numpy's own refusal (or what it loads) is in the truth.
#[test]
fn every_bad_file_is_refused_naming_the_problem() {
    let truth = truth();
    let bad = truth["bad"].as_object().expect("bad");
    let expected: [(&str, &str); 14] = [
        (
            "duplicate_key.npy",
            "header: 'descr' is set twice (numpy keeps the last value",
        ),
        (
            "fortran_order_int.npy",
            "header: fortran_order is not a bool: 0",
        ),
        (
            "header_call.npy",
            "header: cannot parse the header: the name '__import__' where a literal was expected at character 10 (only literals are read",
        ),
        (
            "header_not_dict.npy",
            "header: not a dictionary but [('descr', '<f4')]",
        ),
        (
            "header_past_file.npy",
            "header: declared length 32767 bytes runs past the end of the 64-byte file",
        ),
        (
            "header_too_long.npy",
            "header: 10100 characters exceed numpy's 10000-character limit",
        ),
        (
            "key_shadowed.npz",
            "ambiguous archive: the array of 'a.npy.npy' is keyed 'a.npy', but np.load(...)['a.npy'] returns the member 'a.npy' itself",
        ),
        (
            "not_an_array.npz",
            "notes.npy: magic: does not begin with \\x93NUMPY: np.load returns such a member's raw bytes",
        ),
        (
            "object.npy",
            "data: an object array (descr '|O'): its data is a pickle, which np.load refuses without allow_pickle=True",
        ),
        (
            "object_member.npz",
            "extra.npy: data: an object array (descr '|O')",
        ),
        (
            "short_data.npy",
            "data: the header describes 24 bytes (shape [2, 3] of float32) but 20 follow it",
        ),
        (
            "structured.npy",
            "header: descr [('a', '<f4'), ('b', '<i4')] is a structured dtype",
        ),
        (
            "unicode.npy",
            "header: descr '<U2' holds unicode strings: no tensor dtype holds them",
        ),
        (
            "version_4.npy",
            "header: format version 4.0 is not one numpy reads (1.0, 2.0, 3.0)",
        ),
    ];
    assert_eq!(bad.len(), expected.len());
    for (name, says) in expected {
        let path = format!("fixtures/numpy/bad/{name}");
        let numpy = &bad[&path];
        assert!(numpy.is_object(), "{path} is in the truth");
        let e = corrupt_refusal(&path, says);
        // The audit: TP502 for every refusal, TP501 as well for each unsafe global.
        let report = audit(&path);
        let findings = &error_findings(&report)[0];
        let codes: Vec<&str> = findings.iter().map(|(c, _)| c.as_str()).collect();
        let globals = !e.unsafe_globals().is_empty();
        assert_eq!(codes.contains(&"TP501"), globals, "{path}: {findings:?}");
        assert!(codes.contains(&"TP502"), "{path}: {findings:?}");
        // What numpy does: refuses all but the dtypes no tensor holds, a key set twice (it
        // keeps the last) and the archives whose keys say other than their members.
        let numpy_loads = matches!(
            name,
            "unicode.npy"
                | "structured.npy"
                | "duplicate_key.npy"
                | "key_shadowed.npz"
                | "not_an_array.npz"
        );
        assert_eq!(numpy["loads"], numpy_loads, "{path}: {numpy}");
    }
}

#[test]
fn numpy_refuses_what_tensorplay_refuses_for_the_same_reason() {
    let truth = truth();
    let bad = &truth["bad"];
    let numpy = |name: &str| {
        bad[format!("fixtures/numpy/bad/{name}")]["message"]
            .as_str()
            .expect("numpy's message")
            .to_owned()
    };
    assert_eq!(
        numpy("fortran_order_int.npy"),
        "fortran_order is not a valid bool: 0"
    );
    assert!(numpy("header_call.npy").starts_with("malformed node or string"));
    assert!(numpy("header_past_file.npy").contains("expected 32767 bytes got 54"));
    assert!(numpy("header_too_long.npy").starts_with("Header info length (10100) is large"));
    assert_eq!(
        numpy("object.npy"),
        "Object arrays cannot be loaded when allow_pickle=False"
    );
    assert_eq!(
        numpy("object_member.npz"),
        "Object arrays cannot be loaded when allow_pickle=False"
    );
    assert_eq!(
        numpy("short_data.npy"),
        "cannot reshape array of size 5 into shape (2,3)"
    );
    assert!(numpy("version_4.npy").contains("not (4, 0)"));
    // The key set twice: numpy keeps the last value.
    assert_eq!(bad["fixtures/numpy/bad/duplicate_key.npy"]["descr"], "<i4");
    // The member `a.npy.npy` is keyed `a.npy`, under which numpy returns the member `a.npy`:
    // both keys give the int64 array, the float32 one is out of reach.
    let shadowed = &bad["fixtures/numpy/bad/key_shadowed.npz"];
    assert_eq!(shadowed["keys"], serde_json::json!(["a.npy", "a"]));
    assert_eq!(shadowed["values"]["a.npy"], shadowed["values"]["a"]);
    assert_eq!(shadowed["values"]["a"]["descr"], "<i8");
    // A member without the magic string is its raw bytes to numpy.
    let text = &bad["fixtures/numpy/bad/not_an_array.npz"]["values"]["notes"];
    assert_eq!(text["bytes"], 24);
}

#[test]
fn an_object_array_is_tp501_naming_the_globals_its_pickle_would_run() {
    let truth = truth();
    for (name, member) in [
        ("object.npy", "<npy data>"),
        ("object_member.npz", "extra.npy"),
    ] {
        let path = format!("fixtures/numpy/bad/{name}");
        let numpy = &truth["bad"][&path];
        let e = load::open(&root().join(&path)).expect_err(&path);
        assert!(matches!(e, Error::RefusedWithUnsafeGlobals { .. }), "{e}");
        let named: Vec<String> = e
            .unsafe_globals()
            .iter()
            .map(|g| format!("{}.{}", g.module, g.name))
            .collect();
        assert_eq!(serde_json::json!(named), numpy["globals"], "{path}");
        let start = numpy["pickle_offset"].as_u64().expect("offset");
        for g in e.unsafe_globals() {
            assert_eq!(g.member, member, "{path}");
            assert!(g.position > start, "{path}: {g:?}");
        }
        let report = audit(&path);
        let tp501: Vec<String> = error_findings(&report)[0]
            .iter()
            .filter(|(code, _)| code == "TP501")
            .map(|(_, message)| message.clone())
            .collect();
        assert_eq!(tp501.len(), 4, "{path}: {tp501:?}");
        assert!(
            tp501.iter().any(|m| m.contains("__main__.Harmless")),
            "{path}: {tp501:?}"
        );
    }
}

#[test]
fn the_nan_rule_fires_on_a_float_array_holding_a_nan() {
    let report = audit("fixtures/numpy/nan.npy");
    let file = &report["files"][0];
    assert_eq!(file["format"], "numpy-npy");
    let findings = file["findings"].as_array().expect("findings");
    let tp401: Vec<&Value> = findings.iter().filter(|f| f["code"] == "TP401").collect();
    assert_eq!(tp401.len(), 1, "{findings:?}");
    assert!(
        tp401[0]["message"].as_str().unwrap().contains("NaN"),
        "{tp401:?}"
    );
    // The clean arrays beside it have no finding of the kind.
    let clean = audit("fixtures/numpy/float32_c.npy");
    assert_eq!(clean["files"][0]["findings"], serde_json::json!([]));
}

/// `.npy` and `.npz` are checkpoint extensions: a file so named that no reader takes is
/// audited as corrupt (TP502), not skipped; the fixtures folder is walked into its files.
#[test]
fn discovery_audits_npy_and_npz_files() {
    let dir = TempDir::new("numpy-discovery");
    std::fs::write(dir.0.join("weights.npy"), b"not an array").expect("write");
    std::fs::write(dir.0.join("weights.npz"), b"not an archive").expect("write");
    let d = dir.0.to_str().expect("utf-8");
    let report = audit(d);
    let files = report["files"].as_array().expect("files");
    assert_eq!(files.len(), 2, "{report}");
    for codes in error_findings(&report) {
        assert_eq!(codes.len(), 1, "{codes:?}");
        assert_eq!(codes[0].0, "TP502");
        assert!(codes[0].1.contains("not a checkpoint tensorplay can read"));
    }
    let walked = audit("fixtures/numpy");
    let paths: Vec<&str> = walked["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let good = truth()["files"].as_object().expect("files").len();
    let bad = truth()["bad"].as_object().expect("bad").len();
    let partial = truth()["partial"].as_object().expect("partial").len();
    assert_eq!(paths.len(), good + bad + partial, "{paths:?}");
    assert!(paths.contains(&"fixtures/numpy/two.npz"));
}

/// An `.npz` whose members include arrays no tensor dtype holds (strings, a datetime,
/// records), which `np.load` returns like any other: the numeric members are read, the rest
/// left out, each named with its dtype and shape (as `convert` names what it leaves out).
#[test]
fn a_partial_npz_reads_its_numeric_members_and_leaves_out_the_rest() {
    let truth = truth();
    let file = &truth["partial"]["fixtures/numpy/partial.npz"];
    let ckpt = load::open(&root().join("fixtures/numpy/partial.npz")).expect("reads");
    let names: Vec<&str> = ckpt.tensors.iter().map(|t| t.name()).collect();
    let wanted: Vec<&str> = file["arrays"]
        .as_array()
        .expect("arrays")
        .iter()
        .map(|a| a["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, wanted);
    for (t, a) in ckpt
        .tensors
        .iter()
        .zip(file["arrays"].as_array().expect("arrays"))
    {
        assert_eq!(view_sha256(t), a["sha256"], "{}", t.name());
    }
    let left_out = file["left_out"].as_array().expect("left out");
    assert_eq!(ckpt.left_out.count, left_out.len());
    for (ours, theirs) in ckpt.left_out.names.iter().zip(left_out) {
        let shape = shape_of(&theirs["shape"]);
        let name = theirs["name"].as_str().expect("name");
        assert!(ours.starts_with(&format!("{name} (")), "{ours}");
        assert!(ours.ends_with(&format!(", shape {shape:?})")), "{ours}");
        match theirs["descr"].as_str() {
            Some(descr) => assert!(ours.contains(&format!("'{descr}'")), "{ours}"),
            // A structured dtype: its fields, as the header lists them.
            None => assert!(ours.contains("('a', '<i4'), ('b', '<f8')"), "{ours}"),
        }
    }
    // With nothing to refuse, the audit passes it.
    let report = crate::common::audit_json("fixtures/numpy/partial.npz");
    assert_eq!(
        crate::common::error_findings(&report)[0],
        Vec::<(String, String)>::new()
    );
}
