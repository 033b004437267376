//! stable-baselines3 models (`fixtures/sb3/`, written by `fixtures/make_sb3.py` with
//! stable-baselines3 2.9.2) against SB3's own reading (`load_from_zip_file`, in `truth.json`):
//! every parameter of the `.pth` members named as SB3 keys it and read exactly; every
//! `:serialized:` value of `data` judged as the cloudpickle it is, its globals named under its
//! key; a cloudpickled function (a `lambda` learning rate) failing as code; base64 other than
//! `b64encode`'s and cut archives refused.

use crate::common::view_sha256;
use crate::common::zip_writer::ZipWriter;
use crate::common::{
    audit_json as audit, audit_json_with, inspect_json as inspect, read_json, root, unsafe_globals,
    TempConfig,
};
use serde_json::Value;
use std::collections::BTreeSet;
use tensorplay_engine::load::{self, from_buffer};
use tensorplay_engine::{Format, HostBuffer};

const DIR: &str = "fixtures/sb3";

/// Each TP501 of a file's audit as (member, `module.name`).
fn tp501(path: &str) -> BTreeSet<(String, String)> {
    tp501_in(&audit(path))
}

/// Each TP501 of an audit report's one file as (member, `module.name`).
fn tp501_in(report: &Value) -> BTreeSet<(String, String)> {
    unsafe_globals(report).into_iter().collect()
}

/// Truth's `:serialized:` globals as (member tensorplay names them under, `module.name`).
fn serialized(truth: &Value) -> BTreeSet<(String, String)> {
    truth["serialized"]
        .as_object()
        .expect("serialized")
        .iter()
        .flat_map(|(key, globals)| {
            globals.as_array().expect("globals").iter().map(move |g| {
                (
                    format!("data:{key}/<pickle>"),
                    g.as_str().expect("g").to_owned(),
                )
            })
        })
        .collect()
}

#[test]
fn every_parameter_is_named_as_sb3_keys_it_and_read_exactly() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let file = &truth["ppo_cartpole.zip"];
    let path = format!("{DIR}/ppo_cartpole.zip");
    let doc = inspect(&path);
    assert_eq!(doc["format"], "stable-baselines3");
    let expected = file["tensors"].as_array().expect("tensors");
    let tensors = doc["tensors"].as_array().expect("tensors");
    let names: Vec<&Value> = tensors.iter().map(|t| &t["name"]).collect();
    let wanted: Vec<&Value> = expected.iter().map(|t| &t["name"]).collect();
    assert_eq!(names, wanted);
    // The policy's parameters and Adam's two moments of each: a real model, not a stub.
    assert!(expected.len() >= 8 * 4, "{}", expected.len());
    let ckpt = load::open(&root().join(&path)).expect("reads");
    assert_eq!(ckpt.format, Format::StableBaselines3);
    for ((t, want), read) in tensors.iter().zip(expected).zip(&ckpt.tensors) {
        let name = want["name"].as_str().expect("name");
        assert_eq!(t["dtype"], want["dtype"], "{name}");
        assert_eq!(t["shape"], want["shape"], "{name}");
        assert_eq!(view_sha256(read), want["sha256"], "{name}");
    }
}

#[test]
fn every_serialized_value_is_judged_as_the_cloudpickle_it_is() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let named = tp501(&format!("{DIR}/ppo_cartpole.zip"));
    // Every global of every `:serialized:` pickle, under its key, and nothing else: the
    // `.pth` members are state dicts torch.load reads with weights_only=True.
    assert_eq!(named, serialized(&truth["ppo_cartpole.zip"]));
}

#[test]
fn a_cloudpickled_learning_rate_function_fails_as_code() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let named = tp501(&format!("{DIR}/bad/lambda_schedule.zip"));
    for key in ["learning_rate", "lr_schedule"] {
        let code = (
            format!("data:{key}/<pickle>"),
            "cloudpickle.cloudpickle._make_function".to_owned(),
        );
        assert!(named.contains(&code), "{key}: {named:?}");
    }
    assert_eq!(named, serialized(&truth["bad/lambda_schedule.zip"]));
}

/// Allowing the classes a clean model names (SB3's, gymnasium's, `collections.deque`; NumPy's
/// through the `sklearn` preset) passes it; the model whose schedule is a `lambda` still fails,
/// on cloudpickle's code globals alone.
#[test]
fn allowing_what_sb3_writes_of_classes_still_fails_its_code() {
    let config = TempConfig::new(
        "sb3-classes",
        "[pickle]\nallow_presets = [\"sklearn\"]\nallow_globals = [\
         \"stable_baselines3.common.policies.ActorCriticPolicy\", \
         \"stable_baselines3.common.buffers.RolloutBuffer\", \
         \"stable_baselines3.common.utils.FloatSchedule\", \
         \"stable_baselines3.common.utils.ConstantSchedule\", \
         \"gymnasium.spaces.box.Box\", \"gymnasium.spaces.discrete.Discrete\", \
         \"collections.deque\"]\n",
    );
    let report = |path: &str| audit_json_with(&["--config", config.path()], path);
    assert_eq!(
        tp501_in(&report(&format!("{DIR}/ppo_cartpole.zip"))),
        BTreeSet::new()
    );
    let left: BTreeSet<String> = tp501_in(&report(&format!("{DIR}/bad/lambda_schedule.zip")))
        .into_iter()
        .map(|(_, global)| global)
        .collect();
    assert!(!left.is_empty());
    for global in &left {
        assert!(global.starts_with("cloudpickle."), "{left:?}");
    }
}

/// An SB3 archive of `data` alone (and the version record), `data` written here.
fn archive_with_data(data: &str) -> Vec<u8> {
    let mut zip = ZipWriter::default();
    zip.add("data", data.as_bytes());
    zip.add("_stable_baselines3_version", b"2.9.2");
    zip.finish()
}

#[test]
fn serialized_values_are_decoded_only_as_b64encode_writes_them() {
    // `pickle.dumps(os.system, protocol=2)` as Linux names it.
    let pickle = "gAJjcG9zaXgKc3lzdGVtCnEALg==";
    let data = format!(
        r#"{{"a": {{":type:": "<class 'function'>", ":serialized:": "{pickle}"}},
            "nested": {{"b": {{":serialized:": "{pickle}"}}}},
            "odd": {{":serialized:": 3}}, "n": 1}}"#
    );
    let ckpt = from_buffer(HostBuffer::from_vec("m.zip", archive_with_data(&data))).expect("reads");
    assert_eq!(ckpt.format, Format::StableBaselines3);
    // Only top-level values are unpickled (json_to_data); a non-string is skipped by SB3.
    let globals: Vec<(String, String)> = ckpt
        .unsafe_globals
        .iter()
        .map(|g| (g.member.clone(), format!("{}.{}", g.module, g.name)))
        .collect();
    assert_eq!(
        globals,
        [("data:a/<pickle>".to_owned(), "posix.system".to_owned())]
    );
    for bent in [
        "gAJjcG9zaXgKc3lzdGVtCnEALg= =",
        "gAJjcG9zaXgK\nc3lzdGVtCnEALg==",
    ] {
        let data = format!(
            r#"{{"a": {{":serialized:": "{}"}}}}"#,
            bent.replace('\n', "\\n")
        );
        let e =
            from_buffer(HostBuffer::from_vec("m.zip", archive_with_data(&data))).expect_err(bent);
        assert!(e.to_string().contains("data:a"), "{e}");
    }
    let e = from_buffer(HostBuffer::from_vec("m.zip", archive_with_data("[1]"))).expect_err("list");
    assert!(e.to_string().contains("not a JSON object"), "{e}");
}

#[test]
fn a_cut_model_is_refused() {
    let bytes = std::fs::read(root().join(format!("{DIR}/ppo_cartpole.zip"))).expect("fixture");
    for cut in [bytes.len() / 2, bytes.len() - 1] {
        let part = bytes.get(..cut).expect("cut").to_vec();
        assert!(
            from_buffer(HostBuffer::from_vec("cut.zip", part)).is_err(),
            "cut at {cut}"
        );
    }
}
