//! torch.distributed.checkpoint directories against DCP's own reading
//! (`fixtures/make_dcp.py`, `fixtures/dcp/truth.json`): every tensor with its dtype, shape
//! and chunks, each chunk's bytes where the metadata puts them, and the verdict on each
//! hostile copy.

use crate::common::{global_names, read_json, root, stderr, stdout, tensorplay};
use serde_json::Value;

fn inspect(dir: &str) -> Value {
    let out = tensorplay(&["inspect", "--format", "json", dir]);
    assert_eq!(out.status.code(), Some(0), "{dir}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("JSON")
}

fn audit(dir: &str) -> Value {
    let out = tensorplay(&["audit", "--format", "json", "--fail-on", "never", dir]);
    assert_eq!(out.status.code(), Some(0), "{dir}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("JSON report")
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("integer"))
        .collect()
}

/// The chunk's elements as f64, decoded from its file at the storage's offset.
fn chunk_values(data_ptr: &Value, dtype: &str, count: usize) -> Option<Vec<f64>> {
    let file = root().join(data_ptr["file"].as_str().expect("file"));
    let bytes = std::fs::read(&file).expect("chunk file");
    let at = data_ptr["offset"].as_u64().expect("offset") as usize;
    let size = match dtype {
        "float32" => 4,
        "int64" => 8,
        "bool" => 1,
        _ => return None,
    };
    let raw = bytes.get(at..at + size * count).expect("inside its file");
    Some(
        raw.chunks_exact(size)
            .map(|b| match dtype {
                "float32" => f32::from_le_bytes(b.try_into().unwrap()) as f64,
                "int64" => i64::from_le_bytes(b.try_into().unwrap()) as f64,
                _ => f64::from(b[0]),
            })
            .collect(),
    )
}

/// The values of `whole` (row-major, of `shape`) inside the box `offsets`/`sizes`.
fn window(whole: &[f64], shape: &[u64], offsets: &[u64], sizes: &[u64]) -> Vec<f64> {
    let count: u64 = sizes.iter().product();
    (0..count)
        .map(|mut i| {
            let mut flat = 0u64;
            let mut stride = 1u64;
            for d in (0..shape.len()).rev() {
                let at = offsets[d] + i % sizes[d];
                i /= sizes[d];
                flat += at * stride;
                stride *= shape[d];
            }
            whole[flat as usize]
        })
        .collect()
}

fn matches_truth(name: &str) {
    let dir = format!("fixtures/dcp/{name}");
    let truth = &read_json("fixtures/dcp/truth.json")[name];
    let doc = inspect(&dir);
    assert_eq!(doc["format"], "torch-distributed");
    let expected = truth["tensors"].as_object().expect("tensors");
    let chunked = doc["chunked_tensors"].as_array().expect("chunked_tensors");
    let names: Vec<&str> = chunked
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut wanted: Vec<&str> = expected.keys().map(String::as_str).collect();
    let mut sorted = names.clone();
    sorted.sort();
    wanted.sort();
    assert_eq!(sorted, wanted, "{dir}");
    let tensors = doc["tensors"].as_array().expect("tensors");
    let storages = doc["storages"].as_array().expect("storages");
    let mut chunk_count = 0;
    for t in chunked {
        let fqn = t["name"].as_str().unwrap();
        let e = &expected[fqn];
        assert_eq!(t["dtype"], e["dtype"], "{fqn}");
        assert_eq!(t["shape"], e["shape"], "{fqn}");
        let chunks = t["chunks"].as_array().unwrap();
        let truth_chunks = e["chunks"].as_array().unwrap();
        assert_eq!(chunks.len(), truth_chunks.len(), "{fqn}");
        let whole: Vec<f64> = e["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        for (c, tc) in chunks.iter().zip(truth_chunks) {
            chunk_count += 1;
            assert_eq!(c["offsets"], tc["offsets"], "{fqn}");
            assert_eq!(c["sizes"], tc["sizes"], "{fqn}");
            // The chunk's own tensor: named as the tensor when it is the only chunk.
            let own = c["tensor"].as_str().unwrap();
            if truth_chunks.len() == 1 {
                assert_eq!(own, fqn);
            } else {
                assert!(own.starts_with(&format!("{fqn}@")), "{own}");
            }
            let tensor = tensors
                .iter()
                .find(|x| x["name"] == own)
                .expect("chunk tensor");
            assert_eq!(tensor["shape"], tc["sizes"], "{own}");
            assert_eq!(tensor["dtype"], e["dtype"], "{own}");
            assert_eq!(tensor["storage"], c["storage"], "{own}");
            // Its bytes lie in the item's range of the file the metadata names.
            let storage = &storages[c["storage"].as_u64().unwrap() as usize];
            let ptr = &storage["data_ptr"];
            assert_eq!(
                ptr["file"].as_str().unwrap(),
                format!("{dir}/{}", tc["file"].as_str().unwrap())
            );
            let offset = ptr["offset"].as_u64().unwrap();
            let start = tc["offset"].as_u64().unwrap();
            let end = start + tc["length"].as_u64().unwrap();
            let nbytes = storage["nbytes"].as_u64().unwrap();
            assert!(start < offset && offset + nbytes <= end, "{own}: {offset}");
            // And they are the values DCP loads there.
            let (shape, offsets, sizes) =
                (u64s(&e["shape"]), u64s(&c["offsets"]), u64s(&c["sizes"]));
            let count = sizes.iter().product::<u64>() as usize;
            let dtype = e["dtype"].as_str().unwrap();
            if let Some(values) = chunk_values(ptr, dtype, count) {
                assert_eq!(values, window(&whole, &shape, &offsets, &sizes), "{own}");
            }
        }
    }
    // Every tensor listed is a chunk: the byte items of these state dicts hold none.
    assert_eq!(tensors.len(), chunk_count, "{dir}");
    assert!(
        doc["unsafe_globals"].as_array().unwrap().is_empty(),
        "{dir}"
    );
}

#[test]
fn a_plain_state_dict_matches_dcp_own_reading() {
    matches_truth("plain");
}

#[test]
fn a_tensor_saved_in_chunks_is_one_tensor_of_its_chunks() {
    matches_truth("chunked");
    let doc = inspect("fixtures/dcp/chunked");
    let files: Vec<&str> = doc["storages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["data_ptr"]["file"].as_str().unwrap())
        .collect();
    // The text output lists the tensor with its chunks.
    let out = tensorplay(&["inspect", "fixtures/dcp/chunked"]);
    let text = stdout(&out);
    assert!(
        text.contains("model.weight  float32  [6, 4]  [0, 0]+[2, 4] [2, 0]+[1, 4] [3, 0]+[3, 4]"),
        "{text}"
    );
    // The chunks are spread over both .distcp files.
    assert!(files.contains(&"fixtures/dcp/chunked/__0_0.distcp"));
    assert!(files.contains(&"fixtures/dcp/chunked/__0_1.distcp"));
}

#[test]
fn good_directories_are_one_checkpoint_that_passes() {
    for (name, truth) in read_json("fixtures/dcp/truth.json")
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k == "plain" || *k == "chunked")
    {
        let report = audit(&format!("fixtures/dcp/{name}"));
        let files = report["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{name}");
        assert_eq!(files[0]["format"], "torch-distributed");
        assert_eq!(files[0]["findings"], serde_json::json!([]), "{name}");
        let skipped = report["skipped"].as_array().map_or(0, Vec::len);
        assert_eq!(skipped, truth["files"].as_array().unwrap().len(), "{name}");
    }
}

#[test]
fn each_hostile_directory_fails_with_its_reason() {
    let cases = [
        ("truncated", "'optim.state.0.exp_avg' (__0_0.distcp bytes 11668..13245) lies outside its file (13145 bytes)"),
        ("missing_file", "item file fixtures/dcp/bad/missing_file/__0_0.distcp: cannot read"),
        ("past_end", "lies outside its file"),
        ("not_a_record", "__0_0.distcp"),
        ("shape_mismatch", "holds a tensor of shape [4, 3], but the metadata says [3, 4]"),
        ("dtype_mismatch", "holds float32, but the metadata says float64"),
        ("overlap", "chunks [0, 0] and [1, 0] of 'model.weight' overlap"),
        ("gap", "the chunks of 'model.weight' cover 20 of its 24 elements"),
        ("outside", "chunk [3, 0] of sizes [3, 4] reaches past 'model.weight' of size [5, 4]"),
        ("shared_bytes", "(__0_0.distcp bytes 3783..5360) and chunk [0] of 'model.norm.weight' (__0_0.distcp bytes 3783..5360) share bytes"),
        ("unsafe_global", ".metadata at byte"),
    ];
    let truth = read_json("fixtures/dcp/truth.json");
    let bad = truth["bad"].as_object().unwrap();
    assert_eq!(bad.len(), cases.len());
    for (name, message) in cases {
        let expect = bad[name]["expect"].as_str().unwrap();
        let report = audit(&format!("fixtures/dcp/bad/{name}"));
        let findings = report["files"][0]["findings"].as_array().unwrap();
        assert_eq!(findings.len(), 1, "{name}: {findings:?}");
        assert_eq!(findings[0]["code"], expect, "{name}");
        assert_eq!(findings[0]["severity"], "error", "{name}");
        let text = findings[0]["message"].as_str().unwrap();
        assert!(text.contains(message), "{name}: {text}");
        if expect == "TP503" {
            let fix = findings[0]["fix"].as_str().unwrap();
            assert!(
                fix.contains("torch.distributed.checkpoint.save"),
                "{name}: {fix}"
            );
        }
        // Never a pass: the gate fails without --fail-on never.
        let out = tensorplay(&["audit", &format!("fixtures/dcp/bad/{name}")]);
        assert_eq!(out.status.code(), Some(1), "{name}");
    }
}

#[test]
fn only_dcp_own_dataclasses_are_data_in_metadata() {
    let doc = inspect("fixtures/dcp/bad/unsafe_global");
    assert_eq!(global_names(&doc["unsafe_globals"]), ["posix.getcwd"]);
    assert_eq!(doc["unsafe_globals"][0]["member"], ".metadata");
}

#[test]
fn a_metadata_refused_midway_names_no_dcp_dataclass() {
    // Over its budget partway through, after DCP's dataclasses and before any other global.
    let out = tensorplay(&[
        "audit",
        "--format",
        "json",
        "--fail-on",
        "never",
        "--max-memory",
        "4KiB",
        "fixtures/dcp/plain",
    ]);
    let report: Value = serde_json::from_str(&stdout(&out)).expect("JSON report");
    let findings = report["files"][0]["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0]["code"], "TP502");
    let text = findings[0]["message"].as_str().unwrap();
    assert!(text.contains("exceeds the memory budget"), "{text}");
    assert!(!text.contains("torch.distributed"), "{text}");
}
