//! `tensorplay inspect` against the truth the safetensors library wrote for each fixture.

use crate::common::{
    assert_bytes_as_truth, checked_weights_only, good_truth_files, read_json, root, stderr, stdout,
    tensorplay,
};
use tensorplay_engine::load;

#[test]
fn json_matches_the_library_truth_for_every_good_fixture() {
    let truths = good_truth_files();
    assert!(
        truths.len() >= 7,
        "expected the committed fixtures, found {truths:?}"
    );
    for truth_file in truths {
        let truth = read_json(&truth_file);
        let path = truth["inspect"]["path"]
            .as_str()
            .expect("truth names its file");
        let out = tensorplay(&["inspect", "--format", "json", path]);
        assert_eq!(out.status.code(), Some(0), "{path}: {}", stderr(&out));
        let got: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("valid JSON");
        let got = checked_weights_only(got, path);
        assert_eq!(got, truth["inspect"], "{path} differs from {truth_file}");
    }
}

/// safetensors truths hash each tensor's bytes, PyTorch truths each storage's (by key).
#[test]
fn every_tensor_points_at_the_bytes_the_library_reads() {
    for truth_file in good_truth_files() {
        let truth = read_json(&truth_file);
        let path = truth["inspect"]["path"].as_str().expect("path");
        let ckpt = load::open(&root().join(path)).expect(path);
        for tensor in &ckpt.tensors {
            let imp = tensor.tensor_impl();
            imp.verify_data_ptr_consistency(tensor.name())
                .expect("consistent");
        }
        assert_bytes_as_truth(path, &ckpt, &truth);
    }
}

#[test]
fn the_sharded_set_spans_both_shards() {
    let out = tensorplay(&[
        "inspect",
        "--format",
        "json",
        "fixtures/safetensors/sharded/model.safetensors.index.json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(doc["format"], "safetensors-index");
    let files: std::collections::BTreeSet<&str> = doc["storages"]
        .as_array()
        .expect("storages")
        .iter()
        .map(|s| s["data_ptr"]["file"].as_str().expect("file"))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    let index = read_json("fixtures/safetensors/sharded/model.safetensors.index.json");
    assert_eq!(
        doc["tensors"].as_array().expect("tensors").len(),
        index["weight_map"].as_object().expect("weight_map").len()
    );
}

#[test]
fn text_output_shows_every_layer() {
    let out = tensorplay(&["inspect", "fixtures/safetensors/basic.safetensors"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let truth = read_json("fixtures/safetensors/basic.safetensors.truth.json");
    let tensors = truth["inspect"]["tensors"].as_array().expect("tensors");
    let first = text.lines().next().expect("a header line");
    assert_eq!(
        first,
        format!(
            "fixtures/safetensors/basic.safetensors: safetensors, {n} tensors, {n} storages, 60 B",
            n = tensors.len()
        )
    );
    assert!(text.contains("metadata: format=pt, note=basic"), "{text}");
    for t in tensors {
        let name = t["name"].as_str().expect("name");
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{text}"));
        assert!(row.contains(t["dtype"].as_str().expect("dtype")), "{row}");
    }
    // The storage table names the backend and the file offset of every DataPtr.
    for s in truth["inspect"]["storages"].as_array().expect("storages") {
        let at = format!(
            "(fixtures/safetensors/basic.safetensors @ {})",
            s["data_ptr"]["offset"]
        );
        assert!(text.contains(&at), "missing {at} in\n{text}");
    }
}

#[test]
fn tensor_filter_shows_one_tensor_and_its_storage() {
    let out = tensorplay(&[
        "inspect",
        "--format",
        "json",
        "--tensor",
        "float32_2x3",
        "fixtures/safetensors/basic.safetensors",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let truth = read_json("fixtures/safetensors/basic.safetensors.truth.json");
    let tensor = truth["inspect"]["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .find(|t| t["name"] == "float32_2x3")
        .expect("fixture tensor");
    assert_eq!(doc["tensors"], serde_json::json!([tensor]));
    let storage = &truth["inspect"]["storages"][tensor["storage"].as_u64().expect("id") as usize];
    assert_eq!(doc["storages"], serde_json::json!([storage]));

    let out = tensorplay(&[
        "inspect",
        "--tensor",
        "nope",
        "fixtures/safetensors/basic.safetensors",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: fixtures/safetensors/basic.safetensors: no tensor named 'nope' (the checkpoint holds 4 tensors)\n"
    );
    assert!(stdout(&out).is_empty());
}

#[test]
fn reading_leaves_the_input_untouched() {
    let path = root().join("fixtures/safetensors/basic.safetensors");
    let before = std::fs::read(&path).expect("fixture");
    let modified = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .expect("mtime");
    let out = tensorplay(&["inspect", "fixtures/safetensors/basic.safetensors"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read(&path).expect("fixture"), before);
    assert_eq!(
        std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .expect("mtime"),
        modified
    );
}

#[test]
fn the_simulated_segment_map_places_each_storage() {
    let out = tensorplay(&[
        "inspect",
        "--alloc",
        "--format",
        "json",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let alloc = &doc["alloc"];
    assert_eq!(alloc["reserved_bytes"], 2 << 20);
    let segments = alloc["segments"].as_array().expect("segments");
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0]["pool"], "small");
    let blocks: Vec<(u64, u64, u64, serde_json::Value)> = segments[0]["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| {
            (
                b["offset"].as_u64().unwrap(),
                b["size"].as_u64().unwrap(),
                b["requested"].as_u64().unwrap(),
                b["storage"].clone(),
            )
        })
        .collect();
    // File order, 512-byte blocks carved from the front of one 2 MiB small segment.
    assert_eq!(
        blocks,
        [
            (0, 512, 48, serde_json::json!(0)),
            (512, 512, 12, serde_json::json!(1)),
            (1024, 512, 24, serde_json::json!(2)),
            (1536, 512, 8, serde_json::json!(3)),
            (2048, (2 << 20) - 2048, 0, serde_json::Value::Null),
        ]
    );
    let text = stdout(&tensorplay(&[
        "inspect",
        "--alloc",
        "fixtures/pytorch/state_dict.pt",
    ]));
    assert!(text.contains("Simulated GPU load (PyTorch caching allocator, default settings): 92 requested, 2048 allocated, 2097152 reserved in 1 segments"), "{text}");
    // Without --alloc, the JSON has no such key.
    let plain = stdout(&tensorplay(&[
        "inspect",
        "--format",
        "json",
        "fixtures/pytorch/state_dict.pt",
    ]));
    assert!(!plain.contains("\"alloc\""));
}

/// The text is the same run after run; process addresses only when asked for.
#[test]
fn text_is_deterministic_and_addresses_are_opt_in() {
    let path = "fixtures/pytorch/state_dict.pt";
    let once = stdout(&tensorplay(&["inspect", path]));
    assert_eq!(once, stdout(&tensorplay(&["inspect", path])));
    assert!(!once.contains("0x"), "{once}");
    assert!(
        once.contains("mmap (fixtures/pytorch/state_dict.pt @ 1024)"),
        "{once}"
    );
    let with = stdout(&tensorplay(&["inspect", "--addresses", path]));
    assert!(with.contains("mmap 0x"), "{with}");
}
