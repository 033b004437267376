//! torch.distributed.checkpoint directories against DCP's own reading
//! (`fixtures/make_dcp.py`, `fixtures/dcp/truth.json`): every tensor with its dtype, shape
//! and chunks, each chunk's bytes where the metadata puts them, and the verdict on each
//! hostile copy.

use crate::common::{
    audit_json as audit, global_names, inspect_json as inspect, read_json, root, stdout, tensorplay,
};
use serde_json::Value;
use tensorplay_engine::load;

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
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
    decode(&bytes[at..], dtype, count)
}

/// The first `count` elements of `bytes` as f64, for the dtypes the fixtures decode.
fn decode(bytes: &[u8], dtype: &str, count: usize) -> Option<Vec<f64>> {
    let size = match dtype {
        "float32" => 4,
        "int64" => 8,
        "bool" => 1,
        _ => return None,
    };
    let raw = bytes.get(..size * count).expect("inside its bytes");
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
    matches_dcp_truth(
        &format!("fixtures/dcp/{name}"),
        &read_json("fixtures/dcp/truth.json")[name],
    );
}

/// The DCP directory `dir` reads as its truth (make_dcp.py's `describe`) says DCP reads it:
/// every tensor with its dtype, shape and chunks, each chunk's bytes in its item's range of
/// the file the metadata names, holding the values `dcp.load` gave.
pub(crate) fn matches_dcp_truth(dir: &str, truth: &Value) {
    // An item written through a transform is read from the bytes the transform gives back,
    // not from the file: its values are checked by `compressed_values_match_truth`.
    let transformed = truth.get("transforms").is_some();
    let doc = inspect(dir);
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
        let whole = f64s(&e["values"]);
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
            if transformed {
                continue;
            }
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

/// Each tensor of a transformed checkpoint holds, in the bytes its item decompresses to, the
/// values `dcp.load` read.
fn compressed_values_match_truth(name: &str) {
    let truth = &read_json("fixtures/dcp/truth.json")[name];
    let ckpt = load::open(&root().join("fixtures/dcp").join(name)).expect(name);
    let tensors = truth["tensors"].as_object().unwrap();
    assert_eq!(ckpt.tensors.len(), tensors.len(), "{name}");
    for (fqn, e) in tensors {
        let tensor = ckpt.tensors.iter().find(|t| t.name() == fqn).expect(fqn);
        let imp = tensor.tensor_impl();
        let bytes = imp
            .storage()
            .data_ptr()
            .bytes()
            .expect("decompressed bytes");
        let whole = f64s(&e["values"]);
        let dtype = e["dtype"].as_str().unwrap();
        if let Some(values) = decode(bytes, dtype, whole.len()) {
            assert_eq!(values, whole, "{fqn}");
        }
    }
}

#[test]
fn a_zstd_compressed_checkpoint_reads_as_dcp_load_reads_it() {
    let truth = read_json("fixtures/dcp/truth.json");
    assert_eq!(
        truth["zstd"]["transforms"],
        serde_json::json!([["stream.zstd/1"]])
    );
    matches_truth("zstd");
    compressed_values_match_truth("zstd");
    // The same state dict as plain/, read the same, but from the decompressed records.
    for (fqn, e) in truth["zstd"]["tensors"].as_object().unwrap() {
        let p = &truth["plain"]["tensors"][fqn];
        assert_eq!(
            (&e["dtype"], &e["shape"]),
            (&p["dtype"], &p["shape"]),
            "{fqn}"
        );
        assert_eq!(e["values"], p["values"], "{fqn}");
    }
    let doc = inspect("fixtures/dcp/zstd");
    let ptr = &doc["storages"][0]["data_ptr"];
    assert_eq!(ptr["backend"], "heap", "{ptr}");
}

#[test]
fn a_safetensors_serialized_checkpoint_is_refused_for_what_it_is() {
    let truth = &read_json("fixtures/dcp/truth.json")["safetensors"];
    // dcp.load cannot read it back: the tensor items all start at one safetensors header.
    assert!(truth["dcp_load_error"].as_str().is_some(), "{truth}");
    assert_eq!(
        truth["items"]["model.w"]["offset"],
        truth["items"]["model.b"]["offset"]
    );
    let report = audit("fixtures/dcp/safetensors");
    let findings = report["files"][0]["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0]["code"], "TP502");
    let text = findings[0]["message"].as_str().unwrap();
    assert!(text.contains("serialization_format=SAFETENSORS"), "{text}");
    assert!(!text.contains("share bytes"), "{text}");
}

/// With `flatten_state_dict=False` each top-level entry is one bytes item holding a nested
/// dict: its tensors and DTensors are named under the entry, and every DTensor's component
/// is a tensor of the checkpoint, as `dcp.load`'s planner gets them.
#[test]
fn a_nested_state_dict_of_dtensors_is_named_as_dcp_load_reads_it() {
    let truth = &read_json("fixtures/dcp/truth.json")["nested_dtensor"];
    let doc = inspect("fixtures/dcp/nested_dtensor");
    assert_eq!(doc["format"], "torch-distributed");
    let tensors = doc["tensors"].as_array().unwrap();
    let storages = doc["storages"].as_array().unwrap();
    let composites = doc["composites"].as_array().unwrap();
    let tensor = |name: &str| {
        tensors
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no tensor '{name}'"))
    };
    let values = |t: &Value, dtype: &str, count: usize| {
        let storage = &storages[t["storage"].as_u64().unwrap() as usize];
        chunk_values(&storage["data_ptr"], dtype, count).expect("decoded")
    };
    let floats = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    // Every component names a tensor the checkpoint has.
    for c in composites {
        for part in c["components"].as_array().unwrap() {
            tensor(part["tensor"].as_str().unwrap());
        }
    }
    let dtensors = truth["dtensors"].as_object().unwrap();
    assert_eq!(composites.len(), dtensors.len());
    for (fqn, e) in dtensors {
        let c = composites
            .iter()
            .find(|c| c["name"] == fqn.as_str())
            .unwrap_or_else(|| panic!("no composite '{fqn}'"));
        assert_eq!(c["subclass"], "torch.distributed.tensor.DTensor", "{fqn}");
        assert_eq!(c["shape"], e["shape"], "{fqn}");
        assert_eq!(c["dtype"], e["dtype"], "{fqn}");
        assert_eq!(c["placements"], e["placements"], "{fqn}");
        let parts = c["components"].as_array().unwrap();
        assert_eq!(parts.len(), 1, "{fqn}");
        let local = format!("{fqn}._local_tensor");
        assert_eq!(parts[0]["tensor"], local.as_str());
        let t = tensor(&local);
        assert_eq!(t["shape"], e["local_shape"], "{fqn}");
        let expected = floats(&e["local_values"]);
        assert_eq!(values(t, "float32", expected.len()), expected, "{fqn}");
    }
    let plain = truth["tensors"].as_object().unwrap();
    for (fqn, e) in plain {
        let t = tensor(fqn);
        assert_eq!(t["shape"], e["shape"], "{fqn}");
        let expected = floats(&e["values"]);
        assert_eq!(values(t, "float32", expected.len()), expected, "{fqn}");
    }
    // And each DTensor's device mesh keeps its ranks, named by attribute path.
    for fqn in dtensors.keys() {
        let mesh = tensor(&format!("{fqn}._spec.mesh.mesh"));
        assert_eq!(
            (&mesh["dtype"], &mesh["shape"]),
            (&"int32".into(), &serde_json::json!([1]))
        );
    }
    assert_eq!(tensors.len(), 2 * dtensors.len() + plain.len());
    // No tensor item: the state dict's entries are each one bytes item.
    assert!(doc["chunked_tensors"].as_array().is_none_or(Vec::is_empty));
    assert_eq!(truth["bytes"], serde_json::json!(["model", "optim"]));
}

/// `dcp.load` imports `torch.distributed.tensor`, which registers DTensor's classes as safe
/// globals: its bytes items naming them are judged with them resolved, so a checkpoint of
/// DTensors saved without flattening gets no TP501.
#[test]
fn dtensor_classes_in_bytes_items_are_resolved_as_dcp_load_resolves_them() {
    let report = audit("fixtures/dcp/nested_dtensor");
    let codes: Vec<&str> = report["files"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["code"].as_str())
        .collect();
    assert!(!codes.is_empty(), "the mesh tensors' tie is still reported");
    assert!(!codes.contains(&"TP501"), "{codes:?}");
    // The same classes in a plain torch.save file are named: torch.load imports nothing.
    let plain = audit("fixtures/torch215/dtensor.pt");
    let named: Vec<&str> = plain["files"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "TP501")
        .filter_map(|f| f["global"]["name"].as_str())
        .collect();
    assert!(named.contains(&"DTensor"), "{named:?}");
}

#[test]
fn good_directories_are_one_checkpoint_that_passes() {
    for (name, truth) in read_json("fixtures/dcp/truth.json")
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| ["plain", "chunked", "zstd"].contains(&k.as_str()))
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
        ("unknown_transform", "the storage transform 'stream.lz4/1'"),
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
    assert_eq!(findings[0]["code"], "TP506");
    let text = findings[0]["message"].as_str().unwrap();
    assert!(
        text.contains("exceeds the memory budget (--max-memory)"),
        "{text}"
    );
    assert!(!text.contains("torch.distributed"), "{text}");
}
