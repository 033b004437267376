//! Tensor kinds beyond plain strided tensors (fixtures/pytorch/kinds/, written by torch 2.9.1):
//! sparse, nested and wrapper-subclass tensors with their components, packed quantized
//! dtypes, bare storages and the conj/neg bits, compared with what torch.load reads.

use crate::common::{global_names, read_json, stderr, stdout, tensorplay};
use serde_json::Value;

const DIR: &str = "fixtures/pytorch/kinds";

fn inspect(file: &str) -> Value {
    let path = format!("{DIR}/{file}");
    let out = tensorplay(&["inspect", "--format", "json", &path]);
    assert_eq!(out.status.code(), Some(0), "{file}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("JSON")
}

fn audit_codes(file: &str) -> Vec<String> {
    let path = format!("{DIR}/{file}");
    let out = tensorplay(&["audit", "--format", "json", &path]);
    let doc: Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{file}: {e}: {}", stderr(&out)));
    doc["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["code"].as_str().expect("code").to_owned())
        .collect()
}

fn by_name<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .expect("array")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no '{name}' in {list}"))
}

/// The `nbytes` of the storage a strided tensor entry views.
fn storage_nbytes(doc: &Value, tensor: &Value) -> Value {
    let id = tensor["storage"].as_u64().expect("storage id") as usize;
    doc["storages"][id]["nbytes"].clone()
}

/// One strided tensor of the JSON against torch's dtype, shape and storage size.
fn check_strided(doc: &Value, file: &str, name: &str, truth: &Value) {
    let t = by_name(&doc["tensors"], name);
    assert_eq!(t["dtype"], truth["dtype"], "{file} {name}");
    assert_eq!(t["shape"], truth["shape"], "{file} {name}");
    assert_eq!(
        storage_nbytes(doc, t),
        truth["storage_nbytes"],
        "{file} {name}"
    );
}

#[test]
fn every_kind_reads_as_torch_load_reads_it() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let mut seen = 0;
    for (file, want) in truth.as_object().expect("an object per file") {
        let Some(root) = want["root"].as_str() else {
            continue; // a bad fixture, tested below
        };
        seen += 1;
        let doc = inspect(file);
        if root == "storage" {
            let s = &want["storage"];
            assert_eq!(doc["tensors"], Value::Array(Vec::new()), "{file}");
            let storages = doc["storages"].as_array().expect("storages");
            assert_eq!(storages.len(), 1, "{file}");
            assert_eq!(storages[0]["dtype"], s["dtype"], "{file}");
            assert_eq!(storages[0]["nbytes"], s["nbytes"], "{file}");
            assert_eq!(storages[0]["saved_alone"], true, "{file}");
            continue;
        }
        for t in want["tensors"].as_array().expect("tensors") {
            let name = t["name"].as_str().expect("name");
            let components = t["components"].as_array().expect("components");
            if t["layout"] == "strided" && components.is_empty() {
                check_strided(&doc, file, name, t);
                let json = by_name(&doc["tensors"], name);
                assert_eq!(json["requires_grad"], t["requires_grad"], "{file} {name}");
                assert_eq!(json["is_parameter"], t["is_parameter"], "{file} {name}");
                // The bits appear only when set.
                let json = by_name(&doc["tensors"], name);
                for bit in ["is_conj", "is_neg"] {
                    let got = json.get(bit).cloned().unwrap_or(Value::Bool(false));
                    assert_eq!(got, t[bit], "{file} {name} {bit}");
                }
                assert!(doc.get("composites").is_none(), "{file}");
                continue;
            }
            if t["layout"] == "jagged" {
                // Rebuilt by a function `import torch` registers as a safe global: resolved
                // by torch.load, so not named unsafe; never called, its keyword arguments
                // read as its components.
                let globals = doc["unsafe_globals"].as_array().expect("globals");
                assert!(
                    !globals.iter().any(|g| g["name"] == "_rebuild_njt"),
                    "{file}: {globals:?}"
                );
            }
            let c = by_name(&doc["composites"], name);
            assert_eq!(
                c.get("subclass").cloned().unwrap_or(Value::Null),
                t["subclass"],
                "{file} {name}"
            );
            assert_eq!(c["layout"], t["layout"], "{file} {name}");
            assert_eq!(c["requires_grad"], t["requires_grad"], "{file} {name}");
            assert_eq!(c["is_parameter"], t["is_parameter"], "{file} {name}");
            assert_eq!(c["dtype"], t["dtype"], "{file} {name}");
            if t["layout"] == "nested" || t["layout"] == "jagged" {
                assert_eq!(c["shape"], Value::Null, "{file} {name}");
            } else {
                assert_eq!(c["shape"], t["shape"], "{file} {name}");
            }
            let parts = c["components"].as_array().expect("components");
            let roles: Vec<&Value> = parts.iter().map(|p| &p["role"]).collect();
            let want_roles: Vec<&Value> = components.iter().map(|p| &p["role"]).collect();
            assert_eq!(roles, want_roles, "{file} {name}");
            for (part, want_part) in parts.iter().zip(components) {
                let tensor = part["tensor"].as_str().expect("tensor name");
                assert_eq!(
                    tensor,
                    format!("{name}.{}", want_part["role"].as_str().expect("role")),
                    "{file}"
                );
                check_strided(&doc, file, tensor, want_part);
            }
            // The components are the only tensors of these files, but for a DTensor's
            // device mesh's own (below) and a jagged tensor's cached sequence lengths.
            let mesh = want["dtensor"]["mesh_tensors"]
                .as_object()
                .map_or(0, |m| m.len());
            let tensors = doc["tensors"].as_array().expect("tensors");
            let cache = format!("{name}._metadata_cache.");
            let cached = tensors
                .iter()
                .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with(&cache)))
                .count();
            assert_eq!(tensors.len(), components.len() + mesh + cached, "{file}");
        }
    }
    assert_eq!(seen, 17, "every kind fixture is compared");
}

#[test]
fn packed_quantized_tensors_are_in_bounds_and_one_grown_past_its_storage_is_not() {
    // [3, 5] quint4x2: 15 nibbles in 8 bytes of a 9-byte storage (rows rounded up);
    // quint2x4: 15 crumbs in 4 bytes of 6. Counting a byte per element reached 15.
    for file in ["quint4x2.pt", "quint2x4.pt"] {
        let codes = audit_codes(file);
        assert!(!codes.contains(&"TP107".to_owned()), "{file}: {codes:?}");
        assert!(!codes.contains(&"TP502".to_owned()), "{file}: {codes:?}");
    }
    let truth = read_json(&format!("{DIR}/truth.json"));
    // torch.load grows the storage to fit; the file itself is inconsistent.
    assert_eq!(truth["quint4x2_out_of_bounds.pt"]["torch_accepts"], true);
    let codes = audit_codes("quint4x2_out_of_bounds.pt");
    assert!(codes.contains(&"TP107".to_owned()), "{codes:?}");
}

#[test]
fn a_storage_saved_as_itself_is_no_finding() {
    for file in ["untyped_storage.pt", "typed_storage.pt"] {
        let codes = audit_codes(file);
        assert!(codes.is_empty(), "{file}: {codes:?}");
    }
    // Storages that tensors view are not marked.
    let doc = inspect("conj_neg.pt");
    for s in doc["storages"].as_array().expect("storages") {
        assert!(s.get("saved_alone").is_none(), "{s}");
    }
}

#[test]
fn a_wrapper_subclass_names_its_class_and_inner_tensors() {
    let doc = inspect("wrapper_subclass.pt");
    let w = by_name(&doc["composites"], "w");
    assert_eq!(
        w["subclass"],
        "torch.testing._internal.two_tensor.TwoTensor"
    );
    // Only a DTensor has placements.
    assert!(w.get("placements").is_none(), "{w}");
    // Its class is outside torch.load's allowlist: named, never imported.
    let globals = doc["unsafe_globals"].as_array().expect("globals");
    assert!(
        globals.iter().any(|g| g["name"] == "TwoTensor"),
        "{globals:?}"
    );
    // Both inner tensors own their storages.
    for inner in ["w.a", "w.b"] {
        let t = by_name(&doc["tensors"], inner);
        let id = t["storage"].as_u64().expect("id") as usize;
        assert_eq!(doc["storages"][id]["tensors"][0], inner);
    }
}

#[test]
fn a_dtensor_is_a_wrapper_over_its_local_shard_and_its_classes_stay_unsafe() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    for file in ["dtensor_shard.pt", "dtensor_replicate.pt"] {
        let want = &truth[file];
        let doc = inspect(file);
        let w = by_name(&doc["composites"], "w");
        assert_eq!(w["subclass"], "torch.distributed.tensor.DTensor", "{file}");
        assert_eq!(w["layout"], "wrapper", "{file}");
        // The global shape is the composite's; the local shard is its one component.
        assert_eq!(w["shape"], want["tensors"][0]["shape"], "{file}");
        assert_eq!(w["components"][0]["role"], "_local_tensor", "{file}");
        // Its placements, read as data from `_spec`, print as torch prints them.
        assert_eq!(w["placements"], want["dtensor"]["placements"], "{file}");
        let local = by_name(&doc["tensors"], "w._local_tensor");
        assert_eq!(local["shape"], want["dtensor"]["local_shape"], "{file}");
        assert_eq!(local["dtype"], want["tensors"][0]["dtype"], "{file}");
        let values = want["dtensor"]["local_values"].as_array().expect("values");
        assert_eq!(
            storage_nbytes(&doc, local),
            Value::from(values.len() as u64 * 4),
            "{file}: float32 values"
        );
        // The device mesh's own tensor (its ranks) is named by its attribute path.
        let mesh = want["dtensor"]["mesh_tensors"].as_object().expect("mesh");
        assert_eq!(mesh.len(), 1, "{file}: {mesh:?}");
        for (name, t) in mesh {
            let got = by_name(&doc["tensors"], name);
            assert_eq!((&got["dtype"], &got["shape"]), (&t["dtype"], &t["shape"]));
        }
        // torch.load(weights_only=True) refuses these classes unless torch.distributed.tensor
        // is imported first: tensorplay names them, as unsafe, and imports nothing.
        assert!(
            want["torch_default_error"]
                .as_str()
                .is_some_and(|e| e.contains("must be imported to load DTensors")),
            "{file}: {}",
            want["torch_default_error"]
        );
        let globals = global_names(&doc["unsafe_globals"]);
        for class in [
            "torch.distributed.tensor.DTensor",
            "torch.distributed.tensor._dtensor_spec.DTensorSpec",
            "torch.distributed.tensor._dtensor_spec.TensorMeta",
            "torch.distributed.device_mesh.DeviceMesh",
        ] {
            assert!(
                globals.iter().any(|g| g == class),
                "{file}: {class} in {globals:?}"
            );
        }
        let placement = if file == "dtensor_shard.pt" {
            "Shard"
        } else {
            "Replicate"
        };
        assert!(
            want["dtensor"]["placements"][0]
                .as_str()
                .is_some_and(|p| p.starts_with(placement)),
            "{file}"
        );
        assert!(
            globals
                .iter()
                .any(|g| g == &format!("torch.distributed.tensor.placement_types.{placement}")),
            "{file}: {globals:?}"
        );
        let codes = audit_codes(file);
        assert_eq!(
            codes.iter().filter(|c| *c == "TP501").count(),
            5,
            "{file}: {codes:?}"
        );
    }
}

#[test]
fn convert_refuses_what_safetensors_cannot_hold_and_writes_nothing() {
    let dir = crate::common::TempDir::new("kinds-convert");
    for (file, why) in [
        ("sparse_coo.pt", "tensor 'adj' is sparse_coo"),
        ("nested.pt", "tensor 'nt' is nested"),
        ("conj_neg.pt", "tensor 'conj' has its conjugate bit set"),
    ] {
        let out_file = dir.0.join(format!("{file}.safetensors"));
        let out = tensorplay(&[
            "convert",
            &format!("{DIR}/{file}"),
            out_file.to_str().expect("utf-8 path"),
        ]);
        assert_eq!(out.status.code(), Some(2), "{file}");
        assert!(stderr(&out).contains(why), "{file}: {}", stderr(&out));
        assert!(!out_file.exists(), "{file}");
    }
}

#[test]
fn inspect_one_composite_shows_it_with_its_components_and_their_storages() {
    let out = tensorplay(&[
        "inspect",
        "--format",
        "json",
        "--tensor",
        "nt",
        &format!("{DIR}/nested.pt"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let composites = doc["composites"].as_array().expect("composites");
    assert_eq!(composites.len(), 1);
    assert_eq!(composites[0]["layout"], "nested");
    let names: Vec<&str> = doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        ["nt.buffer", "nt.sizes", "nt.strides", "nt.storage_offsets"]
    );
    assert_eq!(doc["storages"].as_array().expect("storages").len(), 4);
    // One component alone leaves the composite out.
    let out = tensorplay(&[
        "inspect",
        "--format",
        "json",
        "--tensor",
        "nt.sizes",
        &format!("{DIR}/nested.pt"),
    ]);
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert!(doc.get("composites").is_none());
    assert_eq!(doc["tensors"].as_array().expect("tensors").len(), 1);
}
