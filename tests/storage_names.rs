//! Every storage is named: a storage a whole-model pickle reaches only through a module's
//! plain attributes (an anchor generator's `_wh_pairs`, a detection head's `stride`) gets the
//! attribute path torch reaches it by (`fixtures/attributes/`, written and read back by torch
//! 2.9.1 in `fixtures/make_attributes.py`), and no fixture tensorplay reads lists a storage
//! without a tensor name.

use crate::common::{read_json, root, shape_of};
use std::path::{Path, PathBuf};
use tensorplay_engine::load;

#[test]
fn attribute_tensors_are_named_by_their_attribute_path() {
    let truth = read_json("fixtures/attributes/truth.json");
    let expected = truth["attribute_tensors.pt"]["tensors"]
        .as_array()
        .expect("tensors");
    let ckpt = load::open(&root().join("fixtures/attributes/attribute_tensors.pt")).expect("reads");
    let mut ours: Vec<(String, String, Vec<u64>)> = ckpt
        .tensors
        .iter()
        .map(|t| {
            let imp = t.tensor_impl();
            (
                t.name().to_owned(),
                imp.dtype().name().to_owned(),
                imp.layout().sizes().to_vec(),
            )
        })
        .collect();
    let mut theirs: Vec<(String, String, Vec<u64>)> = expected
        .iter()
        .map(|t| {
            (
                t["name"].as_str().expect("name").to_owned(),
                t["dtype"].as_str().expect("dtype").to_owned(),
                shape_of(&t["shape"]),
            )
        })
        .collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
    // The attribute tensors' values, as torch read them.
    for t in expected {
        let name = t["name"].as_str().expect("name");
        let tensor = ckpt.tensor(name).expect(name);
        let bytes = tensor.tensor_impl().view_bytes().expect("bytes");
        let values: Vec<f64> = match t["dtype"].as_str() {
            Some("float32") => bytes
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes(c.try_into().expect("4"))))
                .collect(),
            Some("int64") => bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8")) as f64)
                .collect(),
            other => panic!("{name}: {other:?}"),
        };
        let wanted: Vec<f64> = t["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|v| v.as_f64().expect("number"))
            .collect();
        assert_eq!(values.len(), wanted.len(), "{name}");
        for (a, b) in values.iter().zip(&wanted) {
            assert!((a - b).abs() < 1e-6, "{name}: {values:?} {wanted:?}");
        }
    }
    // Every storage is some tensor's; the parameter kept twice keeps its one storage.
    assert!(ckpt.tensors_by_storage().iter().all(|v| !v.is_empty()));
    assert_eq!(ckpt.storages.len(), 9);
}

/// Files saved as a bare storage (`torch.save(storage)`): what torch.load returns is the
/// storage itself, which no tensor views.
const BARE_STORAGES: [&str; 2] = [
    "fixtures/pytorch/kinds/typed_storage.pt",
    "fixtures/pytorch/kinds/untyped_storage.pt",
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            // Crafted bad and hostile inputs are refused or read for their findings.
            if name != "bad" && name != "hostile" {
                files(&path, out);
            }
        } else if ![".py", ".md", ".txt", ".sh", ".json"]
            .iter()
            .any(|ext| name.ends_with(ext))
        {
            out.push(path);
        }
    }
}

#[test]
fn no_fixture_lists_a_storage_without_a_tensor_name() {
    let mut all = Vec::new();
    files(&root().join("fixtures"), &mut all);
    all.sort();
    let mut read = 0;
    let mut unnamed = Vec::new();
    for path in &all {
        // What is not a checkpoint, or is refused, lists no storage.
        let Ok(ckpt) = load::open(path) else {
            continue;
        };
        read += 1;
        let shown = path
            .strip_prefix(root())
            .unwrap_or(path)
            .display()
            .to_string();
        let bare = BARE_STORAGES.contains(&shown.as_str());
        let empty = ckpt
            .tensors_by_storage()
            .iter()
            .filter(|viewers| viewers.is_empty())
            .count();
        if bare {
            assert_eq!(empty, 1, "{shown}: one storage, saved as such");
        } else if empty > 0 {
            unnamed.push(format!("{shown}: {empty}"));
        }
    }
    assert!(read >= 300, "{read} files read");
    assert_eq!(unnamed, Vec::<String>::new());
}
