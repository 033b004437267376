//! GGUF files against what gguf-py's `GGUFReader` read from them (`fixtures/gguf/truth.json`,
//! written by `fixtures/make_gguf.py`): every good file's tensors (name, type, shape, bytes,
//! data offset) and metadata; every bad file's refusal, its TP code and its message, or,
//! where gguf-py reads it, the finding; NaN and Inf as TP401, in elements and in the
//! float16 scales of quantised blocks; `.gguf` found by discovery.

use crate::common::view_sha256;
use crate::common::{
    audit_json as audit, audit_json_with, corrupt_refusal, error_findings, inspect_json as inspect,
    read_json, root, shape_of, stderr, stdout, tensorplay, TempDir,
};
use serde_json::{json, Value};
use tensorplay_engine::load;

const TRUTH: &str = "fixtures/gguf/truth.json";

fn truth() -> Value {
    read_json(TRUTH)
}

/// The dtype a GGML type is read as: its elements' dtype, or the bytes of its blocks.
fn dtype_of(ggml: &str) -> &'static str {
    match ggml {
        "F32" => "float32",
        "F16" => "float16",
        "BF16" => "bfloat16",
        "F64" => "float64",
        "I8" => "int8",
        "I16" => "int16",
        "I32" => "int32",
        "I64" => "int64",
        _ => "uint8",
    }
}

/// `shape` as GGUF stores it (innermost first), outermost first.
fn reversed(shape: &Value) -> Value {
    let mut dims = shape.as_array().expect("shape").clone();
    dims.reverse();
    Value::Array(dims)
}

/// What the metadata shows of a field gguf-py read: numbers and booleans as they are, a string
/// quoted up to 64 bytes and by its size beyond, an array by its length and element type.
fn shown(field: &Value) -> String {
    let types: Vec<&str> = field["types"]
        .as_array()
        .expect("types")
        .iter()
        .map(|t| t.as_str().expect("type"))
        .collect();
    match types[0] {
        "ARRAY" => format!(
            "array of {} {}",
            field["count"],
            types[1].to_ascii_lowercase()
        ),
        "STRING" if field["bytes"].as_u64().expect("bytes") <= 64 => {
            serde_json::to_string(&field["value"]).expect("quoted")
        }
        "STRING" => format!("string of {} bytes", field["bytes"]),
        _ => field["value"].to_string(),
    }
}

#[test]
fn every_good_file_reads_as_gguf_py_read_it() {
    let truth = truth();
    let files = truth["files"].as_object().expect("files");
    assert!(files.len() >= 8, "{} files", files.len());
    let mut read = 0;
    for (path, file) in files {
        assert_eq!(file["loads"], true, "{path}");
        let doc = inspect(path);
        assert_eq!(doc["format"], "gguf", "{path}");
        let expected = file["tensors"].as_array().expect("tensors");
        let tensors = doc["tensors"].as_array().expect("tensors");
        let storages = doc["storages"].as_array().expect("storages");
        let names: Vec<&Value> = tensors.iter().map(|t| &t["name"]).collect();
        let wanted: Vec<&Value> = expected.iter().map(|t| &t["name"]).collect();
        assert_eq!(names, wanted, "{path}: names in gguf-py's order");
        let composites = doc["composites"].as_array().cloned().unwrap_or_default();
        let ckpt = load::open(&root().join(path)).expect("reads");
        let big = file["byte_order"] == "big";
        for ((t, g), held) in tensors.iter().zip(expected).zip(&ckpt.tensors) {
            let name = format!("{path}: {}", g["name"]);
            let ggml = g["type"].as_str().expect("type");
            assert_eq!(t["dtype"], dtype_of(ggml), "{name}");
            let blocks = dtype_of(ggml) == "uint8";
            if ggml == "BF16" {
                // gguf-py reads BF16 as bytes; its elements are bfloat16 here.
                assert_eq!(t["shape"], reversed(&g["shape"]), "{name}");
            } else {
                assert_eq!(t["shape"], g["data_shape"], "{name}");
            }
            assert_eq!(t["storage_offset"], 0, "{name}");
            assert_eq!(t["nbytes"], g["n_bytes"], "{name}");
            let storage = &storages[t["storage"].as_u64().expect("storage") as usize];
            assert_eq!(storage["nbytes"], g["n_bytes"], "{name}");
            assert_eq!(storage["key"], g["name"], "{name}");
            // Mapped at gguf-py's data offset, unless its elements were swapped.
            let ptr = &storage["data_ptr"];
            if big && !blocks && ggml != "I8" {
                assert_eq!(ptr["backend"], "heap", "{name}");
            } else {
                assert_eq!(ptr["backend"], "mmap", "{name}");
                assert_eq!(ptr["offset"], g["data_offset"], "{name}");
            }
            assert_eq!(view_sha256(held), g["sha256"], "{name}");
            // A block type: a composite of its GGML type, over the logical shape.
            let composite = composites.iter().find(|c| c["name"] == g["name"]);
            match composite {
                Some(c) => {
                    assert!(blocks, "{name}");
                    assert_eq!(c["layout"], ggml, "{name}");
                    assert_eq!(c["shape"], reversed(&g["shape"]), "{name}");
                    assert_eq!(c["dtype"], "float32", "{name}");
                    assert_eq!(c["components"][0]["tensor"], g["name"], "{name}");
                }
                None => assert!(!blocks, "{name}: no composite"),
            }
            let numel: u64 = shape_of(&g["shape"]).iter().product();
            assert_eq!(json!(numel), g["n_elements"], "{name}");
            read += 1;
        }
        // gguf-py's fields, by key, each shown as the metadata shows it.
        let fields = file["fields"].as_object().expect("fields");
        let metadata = doc["metadata"].as_object().expect("metadata");
        let keys: Vec<&String> = metadata.keys().collect();
        let mut wanted: Vec<&String> = fields.keys().collect();
        wanted.sort();
        assert_eq!(keys, wanted, "{path}");
        for (key, field) in fields {
            let ours = metadata[key].as_str().expect("shown");
            if field["types"][0]
                .as_str()
                .is_some_and(|t| t.starts_with("FLOAT"))
            {
                let value: f64 = ours.parse().expect("a number");
                assert_eq!(json!(value), field["value"], "{path}: {key}");
            } else {
                assert_eq!(ours, shown(field), "{path}: {key}");
            }
        }
        assert!(doc.get("weights_only").is_none(), "{path}");
    }
    assert!(read >= 55, "{read} tensors");
}

#[test]
fn the_files_cover_every_block_type_both_byte_orders_both_versions_and_every_value_type() {
    let truth = truth();
    let files = &truth["files"];
    let block_types: Vec<&str> = files["fixtures/gguf/block_types.gguf"]["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["type"].as_str().expect("type"))
        .filter(|&t| t != "F32")
        .collect();
    // Every entry of GGML_QUANT_SIZES with blocks of more than one element.
    assert_eq!(block_types.len(), 26, "{block_types:?}");
    assert_eq!(files["fixtures/gguf/big_endian.gguf"]["byte_order"], "big");
    assert_eq!(files["fixtures/gguf/version_2.gguf"]["version"], 2);
    assert_eq!(files["fixtures/gguf/alignment_64.gguf"]["alignment"], 64);
    let mut types: Vec<&str> = files["fixtures/gguf/metadata.gguf"]["fields"]
        .as_object()
        .expect("fields")
        .values()
        .flat_map(|f| f["types"].as_array().expect("types"))
        .map(|t| t.as_str().expect("type"))
        .collect();
    types.sort_unstable();
    types.dedup();
    assert_eq!(types.len(), 13, "{types:?}");
    // The chat template is shown by its size, never as text.
    let doc = inspect("fixtures/gguf/metadata.gguf");
    assert_eq!(
        doc["metadata"]["tokenizer.chat_template"],
        "string of 118 bytes"
    );
    assert_eq!(doc["metadata"]["t.deep"], "array of 2 array");
}

#[test]
fn the_text_output_shows_the_block_types() {
    let out = tensorplay(&["inspect", "fixtures/gguf/quantized.gguf"]);
    let text = stdout(&out);
    assert!(
        text.starts_with("fixtures/gguf/quantized.gguf: gguf, 5 tensors, 5 storages, 692 B"),
        "{text}"
    );
    assert!(
        text.contains("  output.weight          Q4_0    float32  [16, 32]  output.weight"),
        "{text}"
    );
}

/// Each bad file: the TP code the audit gives it and what its message must say; gguf-py's
/// own reading or refusal is in the truth.
#[test]
fn every_bad_file_is_refused_naming_the_part_or_read_with_its_finding() {
    let truth = truth();
    let bad = truth["bad"].as_object().expect("bad");
    let refused: [(&str, &str); 15] = [
        (
            "alignment_48.gguf",
            "metadata key 'general.alignment': 48 is not a power of two",
        ),
        (
            "alignment_int32.gguf",
            "metadata key 'general.alignment': has type int32, not uint32",
        ),
        (
            "duplicate_key.gguf",
            "metadata key 'tiny.context_length': is set twice",
        ),
        (
            "duplicate_tensor.gguf",
            "tensor info 'b.weight': the name is given to two tensors",
        ),
        (
            "kv_count.gguf",
            "header: kv_count 18446744073709551615 is more key/values than the 392 bytes after it hold",
        ),
        (
            "misaligned.gguf",
            "tensor 'b.weight': offset 68 is not a multiple of the file's alignment 32: gguf-py reads it, ggml (llama.cpp) refuses the file",
        ),
        (
            "name_not_utf8.gguf",
            "tensor info 1: the name at byte 175 is not UTF-8",
        ),
        (
            "offset_past_end.gguf",
            "tensor 'b.weight': its 64 bytes at offset 1048576 of the data section (which starts at byte 256) run past the end of the 416-byte file",
        ),
        (
            "partial_block.gguf",
            "tensor 'q': rows of 16 elements are not whole Q8_0 blocks of 32",
        ),
        (
            "size_overflow.gguf",
            "tensor 'b.weight': 18446744073709551615 F32 elements take more than 2^64 bytes",
        ),
        (
            "string_length.gguf",
            "metadata key 1: a string of 4611686018427387904 bytes at byte 68 runs past the end of the file",
        ),
        (
            "tensor_count.gguf",
            "header: tensor_count 1099511627776 is more tensor infos than the 281 bytes after it hold",
        ),
        (
            "truncated.gguf",
            "tensor 'c.weight': its 32 bytes at offset 128 of the data section (which starts at byte 256) run past the end of the 408-byte file",
        ),
        (
            "unknown_ggml_type.gguf",
            "tensor info 'b.weight': GGML type 4 is not one gguf-py 0.19 or ggml knows",
        ),
        (
            "unknown_value_type.gguf",
            "metadata key 'tiny.context_length': value type 13 is not a GGUF value type",
        ),
    ];
    let version_1 = (
        "version_1.gguf",
        "header: version 1 is not one gguf-py or ggml reads (2, 3)",
    );
    assert_eq!(bad.len(), refused.len() + 2);
    for (name, says) in refused.into_iter().chain([version_1]) {
        let path = format!("fixtures/gguf/bad/{name}");
        let gguf_py = &bad[&path];
        // gguf-py reads the misaligned file; it refuses every other.
        assert_eq!(
            gguf_py["loads"],
            name == "misaligned.gguf",
            "{path}: {gguf_py}"
        );
        corrupt_refusal(&path, says);
        let report = audit(&path);
        let codes: Vec<String> = error_findings(&report)[0]
            .iter()
            .map(|(c, _)| c.clone())
            .collect();
        assert_eq!(codes, ["TP502"], "{path}");
    }
    // The overlap: gguf-py reads it, each tensor seeing 32 bytes of the other as its own; no
    // writer makes such a file, and it is refused.
    let path = "fixtures/gguf/bad/overlap.gguf";
    let gguf_py = &bad[path];
    assert_eq!(gguf_py["loads"], true);
    let (a, b) = (&gguf_py["tensors"][0], &gguf_py["tensors"][1]);
    let a_end = a["data_offset"].as_u64().unwrap() + a["n_bytes"].as_u64().unwrap();
    assert_eq!(a_end - b["data_offset"].as_u64().unwrap(), 32);
    corrupt_refusal(
        path,
        "tensor 'b.weight': its bytes [32, 96) of the data section overlap 'a.weight''s [0, 64): \
         no GGUF writer overlaps tensors",
    );
}

/// `inspect` and `audit` read every GGUF file alike: both read it, or both refuse it (exit 2
/// for `inspect`, TP502 for `audit`).
#[test]
fn inspect_and_audit_agree_on_every_gguf_file() {
    let mut files: Vec<String> = Vec::new();
    for dir in ["fixtures/gguf", "fixtures/gguf/bad"] {
        for entry in std::fs::read_dir(root().join(dir)).expect("dir").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".gguf") {
                files.push(format!("{dir}/{name}"));
            }
        }
    }
    assert!(files.len() > 20, "{files:?}");
    for path in files {
        let inspected = tensorplay(&["inspect", "--format", "json", &path]);
        let report = audit(&path);
        let refused = error_findings(&report)[0]
            .iter()
            .any(|(code, _)| code == "TP502");
        assert_eq!(
            inspected.status.code() == Some(2),
            refused,
            "{path}: inspect exit {:?} ({}), audit {:?}",
            inspected.status.code(),
            stderr(&inspected).trim(),
            error_findings(&report)
        );
        assert_eq!(
            inspected.status.code(),
            Some(if refused { 2 } else { 0 }),
            "{path}"
        );
    }
}

#[test]
fn gguf_py_refuses_what_tensorplay_refuses_for_the_same_reason() {
    let truth = truth();
    let gguf_py = |name: &str| {
        let bad = &truth["bad"][format!("fixtures/gguf/bad/{name}")];
        format!(
            "{}: {}",
            bad["error"].as_str().unwrap(),
            bad["message"].as_str().unwrap()
        )
    };
    assert_eq!(
        gguf_py("alignment_48.gguf"),
        "ValueError: Invalid alignment: must be a non-zero power of two"
    );
    assert_eq!(
        gguf_py("alignment_int32.gguf"),
        "ValueError: Bad type for general.alignment field"
    );
    assert!(gguf_py("duplicate_key.gguf").starts_with("KeyError: 'Duplicate tiny.context_length"));
    assert_eq!(
        gguf_py("duplicate_tensor.gguf"),
        "ValueError: Found duplicated tensor with name b.weight"
    );
    assert!(gguf_py("name_not_utf8.gguf").starts_with("UnicodeDecodeError"));
    assert!(gguf_py("partial_block.gguf").contains("is not a multiple of Q8_0 block size (32)"));
    assert!(gguf_py("truncated.gguf").starts_with("ValueError: cannot reshape array of size 6"));
    assert!(
        gguf_py("offset_past_end.gguf").starts_with("ValueError: cannot reshape array of size 0")
    );
    assert!(gguf_py("unknown_ggml_type.gguf").contains("is not a valid GGMLQuantizationType"));
    assert!(gguf_py("unknown_value_type.gguf").contains("is not a valid GGUFValueType"));
    assert!(gguf_py("version_1.gguf").contains("version 1 which we cannot handle"));
    // Counts and a length past the bytes: gguf-py reads on past the end of the file and fails
    // on the first number it cannot read.
    for name in ["kv_count.gguf", "tensor_count.gguf", "string_length.gguf"] {
        assert!(gguf_py(name).starts_with("IndexError"), "{name}");
    }
}

#[test]
fn the_nan_rule_fires_on_a_nan_and_an_inf_and_not_on_the_clean_tensor() {
    let report = audit("fixtures/gguf/nan.gguf");
    let file = &report["files"][0];
    assert_eq!(file["format"], "gguf");
    let tp401: Vec<String> = error_findings(&report)[0]
        .iter()
        .filter(|(code, _)| code == "TP401")
        .map(|(_, message)| message.clone())
        .collect();
    assert_eq!(tp401.len(), 2, "{tp401:?}");
    assert!(
        tp401[0].starts_with("'inf' (float16) holds 0 NaN, 1 +Inf"),
        "{tp401:?}"
    );
    assert!(
        tp401[1].starts_with("'nan' (float32) holds 1 NaN"),
        "{tp401:?}"
    );
    let clean = audit("fixtures/gguf/dtypes.gguf");
    assert_eq!(clean["files"][0]["findings"], json!([]));
}

/// A NaN float16 scale inside a Q8_0 block is TP401 on the blocks' tensor, naming the block
/// gguf-py's reading of the scales names; the quantised fixtures' scales, all finite, are not.
#[test]
fn a_nan_block_scale_is_tp401_and_finite_scales_are_not() {
    let truth = truth();
    let file = &truth["files"]["fixtures/gguf/nan_scale.gguf"];
    assert_eq!(file["nan_scale_blocks"], json!([1]));
    let report = audit("fixtures/gguf/nan_scale.gguf");
    let tp401: Vec<String> = error_findings(&report)[0]
        .iter()
        .filter(|(code, _)| code == "TP401")
        .map(|(_, message)| message.clone())
        .collect();
    // Four rows of two blocks, one scale each.
    assert_eq!(
        tp401,
        [
            "'blk.0.ffn_up.weight' (Q8_0 blocks) holds 1 NaN, 0 +Inf, 0 -Inf among its 8 float16 \
          block scales (d); first in block 1: every value of such a block dequantises to NaN \
          or ±Inf"
        ],
    );
    let finding = &report["files"][0]["findings"][0];
    assert_eq!(finding["tensors"], json!(["blk.0.ffn_up.weight"]));
    // gguf-py's own quantisations, one block of every type, and a big-endian file's blocks
    // (not scanned): no finding.
    for clean in [
        "fixtures/gguf/quantized.gguf",
        "fixtures/gguf/block_types.gguf",
        "fixtures/gguf/big_endian.gguf",
    ] {
        assert_eq!(audit(clean)["files"][0]["findings"], json!([]), "{clean}");
    }
    // --metadata-only reads no value, so no scale either.
    let report = audit_json_with(&["--metadata-only"], "fixtures/gguf/nan_scale.gguf");
    assert_eq!(report["files"][0]["findings"], json!([]));
}

/// A block-quantised tensor is no plain tensor to convert: refused naming its GGML type.
#[test]
fn conversion_refuses_block_types_and_converts_plain_ones() {
    let dir = TempDir::new("gguf-convert");
    let out = dir.0.join("q.safetensors");
    let run = tensorplay(&[
        "convert",
        "fixtures/gguf/quantized.gguf",
        out.to_str().expect("utf-8"),
    ]);
    assert_ne!(run.status.code(), Some(0));
    assert!(
        stderr(&run).contains("'blk.0.ffn_up.weight' is Q8_0"),
        "{}",
        stderr(&run)
    );
    assert!(!out.exists());
    // Float and integer tensors convert, their bytes verified; the metadata, summarised here,
    // is left behind.
    let run = tensorplay(&[
        "convert",
        "fixtures/gguf/dtypes.gguf",
        out.to_str().expect("utf-8"),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let doc = inspect(out.to_str().expect("utf-8"));
    assert_eq!(doc["metadata"], json!({"format": "pt"}));
    let mut names: Vec<&str> = doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    names.sort_unstable();
    assert_eq!(names.len(), 10);
    assert!(names.contains(&"bf16"), "{names:?}");
}

/// `.gguf` is a checkpoint extension: a file so named that no reader takes is audited as
/// corrupt (TP502), not skipped; the fixtures folder is walked into all its files.
#[test]
fn discovery_audits_gguf_files() {
    let dir = TempDir::new("gguf-discovery");
    std::fs::write(dir.0.join("model.gguf"), b"not a model").expect("write");
    let report = audit(dir.0.to_str().expect("utf-8"));
    let files = report["files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{report}");
    let codes = &error_findings(&report)[0];
    assert_eq!(codes.len(), 1, "{codes:?}");
    assert_eq!(codes[0].0, "TP502");
    let walked = audit("fixtures/gguf");
    let paths: Vec<&str> = walked["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let truth = truth();
    let good = truth["files"].as_object().expect("files").len();
    let bad = truth["bad"].as_object().expect("bad").len();
    assert_eq!(paths.len(), good + bad, "{paths:?}");
    assert!(paths.contains(&"fixtures/gguf/big_endian.gguf"));
}
