//! Checkpoints held as a pickle's byte strings (`fixtures/nested/`, written by
//! `fixtures/make_nested.py` with torch 2.9.1, numpy 2.2.6 and skorch 1.4.0) against what
//! those libraries read from them (`truth.json`): every nested tensor named under its value's
//! path with its dtype, shape and elements; the globals inside judging the file that holds
//! them (TP501); nesting past the cap and nested bytes past `--max-memory` refused.

use crate::common::view_sha256;
use crate::common::{
    audit_json as audit, error_findings, inspect_json as inspect, read_json, root, shape_of,
    unsafe_globals,
};
use serde_json::Value;
use tensorplay_engine::load::{self, ReadLimits};
use tensorplay_engine::ErrorKind;

const DIR: &str = "fixtures/nested";

fn truth() -> Value {
    read_json(&format!("{DIR}/truth.json"))
}

/// Every unsafe global of a file's audit as (`module.name`, member).
fn globals(path: &str) -> Vec<(String, String)> {
    let found = unsafe_globals(&audit(path)).into_iter();
    found.map(|(member, global)| (global, member)).collect()
}

#[test]
fn every_nested_tensor_is_named_under_its_value_and_reads_as_its_library_read_it() {
    let truth = truth();
    let mut checked = 0;
    for file in ["kinds.pkl", "twice.pt", "four_deep.pkl"] {
        let path = format!("{DIR}/{file}");
        let expected = truth[file]["tensors"].as_array().expect("tensors");
        let doc = inspect(&path);
        let tensors = doc["tensors"].as_array().expect("tensors");
        let names: Vec<&Value> = tensors.iter().map(|t| &t["name"]).collect();
        let wanted: Vec<&Value> = expected.iter().map(|t| &t["name"]).collect();
        assert_eq!(names, wanted, "{path}");
        let ckpt = load::open(&root().join(&path)).expect("reads");
        for ((t, want), read) in tensors.iter().zip(expected).zip(&ckpt.tensors) {
            let name = format!("{path}: {}", want["name"]);
            assert_eq!(t["dtype"], want["dtype"], "{name}");
            assert_eq!(t["shape"], want["shape"], "{name}");
            assert_eq!(view_sha256(read), want["sha256"], "{name}");
            checked += 1;
        }
        // Each nested archive's storages are keyed under its value: none collides with
        // another archive's own numbering.
        let keys: Vec<&str> = doc["storages"]
            .as_array()
            .expect("storages")
            .iter()
            .map(|s| s["key"].as_str().expect("key"))
            .collect();
        let mut distinct = keys.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), keys.len(), "{path}: {keys:?}");
    }
    // kinds.pkl: zip, legacy, .npy, .npz; twice.pt: 3; four_deep.pkl: 4.
    assert_eq!(checked, 7 + 3 + 4);
}

#[test]
fn bytes_that_only_begin_like_an_archive_are_data() {
    let doc = inspect(&format!("{DIR}/kinds.pkl"));
    let names: Vec<&str> = doc["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("not_a_zip")),
        "{names:?}"
    );
}

#[test]
fn an_unsafe_global_inside_a_nested_archive_fails_the_file_tp501() {
    let truth = truth();
    let path = format!("{DIR}/bad/payload.pkl");
    let report = audit(&path);
    let errors = &error_findings(&report)[0];
    assert!(
        errors
            .iter()
            .any(|(code, m)| code == "TP501" && m.contains("posix.system")),
        "{errors:?}"
    );
    // Named under the value holding the archive and the archive's own pickle; of what that
    // pickle names (pickletools), the payload is what the allowlist does not accept.
    let named = globals(&path);
    assert_eq!(
        named,
        [(
            "posix.system".to_owned(),
            "<pickle>:weights/archive/data.pkl".to_owned()
        )]
    );
    let inside: Vec<&str> = truth["bad/payload.pkl"]["nested_globals"]
        .as_array()
        .expect("globals")
        .iter()
        .map(|g| g.as_str().expect("global"))
        .collect();
    assert!(inside.contains(&"posix.system"), "{inside:?}");
    // The archive's tensor is read beside it.
    let ckpt = load::open(&root().join(&path)).expect("reads");
    let names: Vec<&str> = ckpt.tensors.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["weights.w"]);
}

#[test]
fn archives_nested_past_the_cap_are_refused_and_up_to_it_read() {
    let truth = truth();
    assert_eq!(truth["four_deep.pkl"]["levels"], 4);
    assert_eq!(truth["five_deep.pkl"]["levels"], 5);
    let deepest = load::open(&root().join(format!("{DIR}/four_deep.pkl"))).expect("4 deep");
    assert_eq!(deepest.tensors.len(), 4);
    let e = load::open(&root().join(format!("{DIR}/five_deep.pkl"))).expect_err("5 deep");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
    assert!(
        e.to_string().contains("archives nested more than 4 deep"),
        "{e}"
    );
    let report = audit(&format!("{DIR}/five_deep.pkl"));
    let errors = &error_findings(&report)[0];
    assert!(errors.iter().any(|(code, _)| code == "TP502"), "{errors:?}");
}

/// Under every budget the file is read whole or refused as over budget, never read in part;
/// some budgets fit the outer pickle but not a nested archive, and the refusal names it.
#[test]
fn a_nested_archive_past_the_memory_budget_fails_closed() {
    let path = root().join(format!("{DIR}/kinds.pkl"));
    let whole = load::open(&path).expect("reads").tensors.len();
    let mut nested_refused = 0;
    for max_memory in (0..16 * 1024).step_by(64) {
        let limits = ReadLimits {
            max_memory,
            ..ReadLimits::default()
        };
        match load::read_with(load::probe(&path).expect("probe"), limits) {
            Ok(ckpt) => assert_eq!(ckpt.tensors.len(), whole, "{max_memory}"),
            Err(e) => {
                assert!(e.over_budget(), "{max_memory}: {e}");
                nested_refused += usize::from(e.to_string().contains("kinds.pkl/<pickle>:"));
            }
        }
    }
    assert!(nested_refused > 0);
}

#[test]
fn skorch_s_nested_pickle_is_judged_with_the_net() {
    let truth = truth();
    for file in ["skorch_net.pkl", "skorch_net.joblib"] {
        let path = format!("{DIR}/{file}");
        let value = truth[file]["value"].as_str().expect("value");
        let under = format!("<pickle>:{value}/<pickle>");
        let inside: Vec<String> = truth[file]["nested_globals"]
            .as_array()
            .expect("globals")
            .iter()
            .map(|g| g.as_str().expect("global").to_owned())
            .collect();
        let named = globals(&path);
        let nested: Vec<&str> = named
            .iter()
            .filter(|(_, member)| *member == under)
            .map(|(g, _)| g.as_str())
            .collect();
        // The module's class, its layers and the call that would torch.load each storage with
        // weights_only=False: named from the nested pickle, each one pickletools shows there.
        // The storages being read as data does not make the call safe.
        for global in [
            "__main__.Tiny",
            "torch.nn.modules.linear.Linear",
            "torch.storage._load_from_bytes",
        ] {
            assert!(nested.contains(&global), "{path}: {global} in {nested:?}");
        }
        // The truth's pickletools walk takes a STACK_GLOBAL's module as the string pushed
        // before its name, so a module fetched from the memo shows as that string
        // (`state.defaultdict` for the optimizer state's `collections.defaultdict`): a global
        // named here is one it shows, or has the name of one it shows.
        let attribute = |g: &str| g.rsplit('.').next().map(str::to_owned);
        for global in &nested {
            assert!(
                inside
                    .iter()
                    .any(|g| g == global || attribute(g) == attribute(global)),
                "{path}: {global}"
            );
        }
        // Each storage handed to `_load_from_bytes` is read: the module's state dict, named
        // under the value as `state_dict()` names it, holds what skorch's own unpickling gives.
        let ckpt = load::open(&root().join(&path)).expect(&path);
        let expected = truth[file]["skorch_state"].as_array().expect("state");
        let module: Vec<_> = expected
            .iter()
            .filter(|t| t["name"].as_str().expect("name").starts_with("module_."))
            .collect();
        assert_eq!(module.len(), 4, "{path}");
        for want in module {
            let name = format!("{value}.{}", want["name"].as_str().expect("name"));
            let read = ckpt
                .tensors
                .iter()
                .find(|t| t.name() == name)
                .unwrap_or_else(|| panic!("{path}: no {name}"));
            let imp = read.tensor_impl();
            assert_eq!(imp.dtype().name(), want["dtype"], "{path}: {name}");
            let shape = shape_of(&want["shape"]);
            assert_eq!(imp.layout().sizes(), shape, "{path}: {name}");
            assert_eq!(view_sha256(read), want["sha256"], "{path}: {name}");
        }
        // The value's storages: one per `_load_from_bytes` call, keyed by it under the value
        // (joblib's own arrays of the outer pickle are keyed apart, by offset).
        let keys: Vec<&str> = ckpt.storages.iter().map(|s| s.key()).collect();
        let nested: Vec<&&str> = keys
            .iter()
            .filter(|k| k.starts_with(&format!("{value}/")))
            .collect();
        assert_eq!(nested.len(), 4, "{path}: {keys:?}");
        assert!(
            nested
                .iter()
                .all(|k| k.starts_with(&format!("{value}/_load_from_bytes@"))),
            "{path}: {keys:?}"
        );
    }
}

/// Under every budget the skorch net is read whole or refused as over budget, never in part:
/// the bytes each `_load_from_bytes` call is given are charged as the pickle's values while it
/// runs, then held for the rest of the read (their storage views them).
#[test]
fn storages_read_from_bytes_are_within_the_memory_budget() {
    let path = root().join(format!("{DIR}/skorch_net.pkl"));
    let whole = load::open(&path).expect("reads").tensors.len();
    let (mut read, mut refused) = (0, 0);
    for max_memory in (0..32 * 1024).step_by(64) {
        let limits = ReadLimits {
            max_memory,
            ..ReadLimits::default()
        };
        match load::read_with(load::probe(&path).expect("probe"), limits) {
            Ok(ckpt) => {
                assert_eq!(ckpt.tensors.len(), whole, "{max_memory}");
                read += 1;
            }
            Err(e) => {
                assert!(e.over_budget(), "{max_memory}: {e}");
                refused += 1;
            }
        }
    }
    assert!(read > 0 && refused > 0, "{read} read, {refused} refused");
}
