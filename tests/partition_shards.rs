//! Sharded sets dealt by shard: a set of 2 or 10 shards over 2 parts gives both parts work,
//! and the merge equals the single job, the findings that need every shard included (a GPU
//! budget the whole set overruns while each shard fits, a tensor held by two shards).

use crate::common::{stderr, tensorplay};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensorplay-shards-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("JSON")
}

/// A safetensors file of float32 tensors (name, values), laid out as the format specifies:
/// the header's length (u64 LE), the JSON header, the data.
fn safetensors(tensors: &[(String, Vec<f32>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, values) in tensors {
        let start = data.len();
        for v in values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        header.insert(
            name.clone(),
            json!({"dtype": "F32", "shape": [values.len()], "data_offsets": [start, data.len()]}),
        );
    }
    let mut text = Value::Object(header).to_string().into_bytes();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend(text);
    bytes.extend(data);
    bytes
}

/// Writes a set of `shards` shards of two 64 Ki-element tensors each into `dir`, with NaN in
/// the shards `nan_in`, and its index; the index's path.
fn write_set(dir: &Path, shards: usize, nan_in: &[usize]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mut weight_map = serde_json::Map::new();
    for i in 0..shards {
        let file = format!("model-{:05}-of-{shards:05}.safetensors", i + 1);
        let tensors: Vec<(String, Vec<f32>)> = (0..2)
            .map(|j| {
                let mut values = vec![0.5f32; 64 << 10];
                if nan_in.contains(&i) && j == 1 {
                    values[7] = f32::NAN;
                }
                (format!("layers.{i}.w{j}"), values)
            })
            .collect();
        for (name, _) in &tensors {
            weight_map.insert(name.clone(), Value::String(file.clone()));
        }
        std::fs::write(dir.join(&file), safetensors(&tensors)).unwrap();
    }
    let index = dir.join("model.safetensors.index.json");
    std::fs::write(&index, json!({"weight_map": weight_map}).to_string()).unwrap();
    index
}

/// The whole audit of `target`, and its two parts merged, with `extra` flags: (exit, report)
/// of each, and the two parts' reports.
fn whole_and_merged(
    target: &str,
    out: &Path,
    extra: &[&str],
) -> ((i32, Value), (i32, Value), Vec<Value>) {
    let audit = |json: &Path, partition: Option<&str>| {
        let mut args = vec!["audit", "--color", "never", "--json", s(json)];
        if let Some(p) = partition {
            args.extend(["--partition", p]);
        }
        args.extend(extra);
        args.push(target);
        let run = tensorplay(&args);
        let code = run.status.code().expect("exit code");
        assert!(
            code <= 1,
            "{target} {partition:?}: exit {code}: {}",
            stderr(&run)
        );
        code
    };
    let whole_json = out.join("whole.json");
    let whole = audit(&whole_json, None);
    let parts: Vec<PathBuf> = (1..=2)
        .map(|k| out.join(format!("part-{k}.json")))
        .collect();
    for (k, part) in parts.iter().enumerate() {
        audit(part, Some(&format!("{}/2", k + 1)));
    }
    let merged_json = out.join("merged.json");
    let run = tensorplay(&[
        "merge",
        "--color",
        "never",
        "--json",
        s(&merged_json),
        s(&parts[0]),
        s(&parts[1]),
    ]);
    let merged = run.status.code().expect("exit code");
    (
        (whole, read(&whole_json)),
        (merged, read(&merged_json)),
        parts.iter().map(|p| read(p)).collect(),
    )
}

/// The shards of `index` each part was given.
fn shards_per_part(parts: &[Value], index: &str) -> Vec<Vec<String>> {
    parts
        .iter()
        .map(|p| {
            p["partition"]["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| i["path"] == index)
                .map(|i| i["shard"].as_str().expect("dealt by shard").to_owned())
                .collect()
        })
        .collect()
}

fn codes(report: &Value, path: &str) -> Vec<(String, Vec<String>)> {
    let file = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in the report"));
    file["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let tensors = f["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect();
            (f["code"].as_str().unwrap().to_owned(), tensors)
        })
        .collect()
}

#[test]
fn a_ten_shard_set_keeps_both_parts_busy_and_merges_into_the_whole_verdict() {
    let out = scratch("ten");
    let index = write_set(&out.join("set"), 10, &[0, 3, 4, 9]);
    let index = s(&index).to_owned();
    // The whole set needs more than 4 MiB of GPU memory; any one shard (512 KiB) fits.
    let ((whole_code, whole), (merged_code, merged), parts) =
        whole_and_merged(&index, &out, &["--gpu-budget", "4MiB"]);
    let dealt = shards_per_part(&parts, &index);
    assert!(
        dealt.iter().all(|d| !d.is_empty()),
        "a part got no shard: {dealt:?}"
    );
    assert_eq!(dealt.iter().map(Vec::len).sum::<usize>(), 10, "{dealt:?}");
    assert_eq!(
        dealt[0].len().abs_diff(dealt[1].len()),
        0,
        "equal shards, unequal split: {dealt:?}"
    );
    assert_eq!(merged_code, whole_code);
    assert_eq!(
        merged, whole,
        "the merged report differs from the whole run"
    );
    let found = codes(&merged, &index);
    let nan: Vec<&str> = found
        .iter()
        .filter(|(c, _)| c == "TP401")
        .map(|(_, t)| t[0].as_str())
        .collect();
    assert_eq!(
        nan,
        ["layers.0.w1", "layers.3.w1", "layers.4.w1", "layers.9.w1"]
    );
    assert!(
        found.iter().any(|(c, _)| c == "TP303"),
        "no over-budget finding: {found:?}"
    );
    // Each part scanned only its own shards: together they found every NaN, alone neither did.
    for part in &parts {
        let own = codes(part, &index)
            .iter()
            .filter(|(c, _)| c == "TP401")
            .count();
        assert!(
            own > 0 && own < 4,
            "a part found {own} of the 4 NaN tensors"
        );
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn the_two_shard_fixture_is_split_and_merges_into_the_whole_run() {
    let out = scratch("two");
    let index = "fixtures/safetensors/sharded/model.safetensors.index.json";
    let ((whole_code, whole), (merged_code, merged), parts) = whole_and_merged(index, &out, &[]);
    let dealt = shards_per_part(&parts, index);
    assert_eq!(
        dealt.iter().filter(|d| d.len() == 1).count(),
        2,
        "{dealt:?}"
    );
    assert_eq!(merged_code, whole_code);
    assert_eq!(merged, whole);
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_tensor_in_two_shards_is_found_by_the_merge_as_by_the_whole_run() {
    let out = scratch("twice");
    let dir = out.join("set");
    let index = write_set(&dir, 2, &[1]);
    // Shard 2 also holds shard 1's first tensor.
    let second = dir.join("model-00002-of-00002.safetensors");
    std::fs::write(
        &second,
        safetensors(&[
            ("layers.0.w0".into(), vec![1.0; 4]),
            ("layers.1.w0".into(), vec![1.0; 4]),
            ("layers.1.w1".into(), vec![f32::NAN; 4]),
        ]),
    )
    .unwrap();
    let index = s(&index).to_owned();
    let ((whole_code, whole), (merged_code, merged), parts) = whole_and_merged(&index, &out, &[]);
    assert!(shards_per_part(&parts, &index).iter().all(|d| d.len() == 1));
    assert_eq!(merged_code, whole_code);
    assert_eq!(merged, whole);
    let found = codes(&merged, &index);
    assert!(found.iter().any(|(c, _)| c == "TP503"), "{found:?}");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn metadata_only_keeps_a_set_whole() {
    let out = scratch("meta");
    let index = s(&write_set(&out.join("set"), 4, &[])).to_owned();
    let (_, _, parts) = whole_and_merged(&index, &out, &["--metadata-only"]);
    let whole: Vec<&Value> = parts
        .iter()
        .flat_map(|p| p["partition"]["inputs"].as_array().unwrap())
        .filter(|i| i["path"] == index.as_str())
        .collect();
    assert_eq!(whole.len(), 1, "{whole:?}");
    assert!(whole[0].get("shard").is_none());
    std::fs::remove_dir_all(&out).ok();
}
