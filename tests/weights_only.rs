//! tensorplay's "would `torch.load(path)` load it" verdict (weights-only, torch's default)
//! against torch's own answer for every fixture (`fixtures/weights_only.json`, recorded by
//! `fixtures/hostile/make_weights_only.py` through `fuzz/differential/oracle_weights_only.py`).

use crate::common::{read_json, root, stdout, tensorplay};
use serde_json::Value;
use tensorplay_engine::WeightsOnly;

const TRUTH: &str = "fixtures/weights_only.json";

#[test]
fn the_verdict_agrees_with_torch_on_every_fixture_tensorplay_reads() {
    let truth = read_json(TRUTH);
    let truth = truth.as_object().expect("path -> answer");
    let (mut judged, mut refused_by_both) = (0, 0);
    for (path, answer) in truth {
        let torch_loads = answer["loads"].as_bool().expect("loads");
        // A file tensorplay cannot read fails the gate as TP502: it has no verdict.
        let Ok(ckpt) = tensorplay_engine::load::open(&root().join(path)) else {
            continue;
        };
        let Some(verdict) = ckpt.weights_only else {
            continue;
        };
        judged += 1;
        match verdict {
            WeightsOnly::Loads => assert!(torch_loads, "{path}: torch refuses: {answer}"),
            WeightsOnly::Refuses { member, reason } => {
                assert!(
                    !torch_loads,
                    "{path}: torch loads it; tensorplay: {member}: {reason}"
                );
                refused_by_both += 1;
                // The unpickler's own refusals are quoted word for word (torch's record
                // keeps its first 200 characters).
                if answer["error"] == "UnpicklingError" {
                    let theirs = answer["reason"].as_str().expect("reason");
                    assert!(
                        reason.starts_with(theirs) || theirs.starts_with(&reason),
                        "{path}: torch says {theirs:?}, tensorplay {reason:?}"
                    );
                }
            }
        }
    }
    assert!(judged >= 80, "only {judged} fixtures judged");
    assert!(
        refused_by_both >= 20,
        "only {refused_by_both} refusals judged"
    );
}

#[test]
fn inspect_and_the_audit_say_why_torch_refuses() {
    let dir = "fixtures/hostile/weights_only";
    let truth = read_json(TRUTH);
    let json = |path: &str| -> Value {
        let out = tensorplay(&["inspect", "--format", "json", path]);
        serde_json::from_str(&stdout(&out)).expect("inspect JSON")
    };
    let loads = json(&format!("{dir}/values.pt"));
    assert_eq!(loads["weights_only"]["loads"], true);
    for name in [
        "protocol_4.pt",
        "pop.pt",
        "namespace.pt",
        "legacy_blocked.pt",
    ] {
        // A file that names an unsafe global fails as TP501; any other refusal is TP505's.
        let global = name == "namespace.pt" || name == "legacy_blocked.pt";
        let path = format!("{dir}/{name}");
        let doc = json(&path);
        assert_eq!(doc["weights_only"]["loads"], false, "{path}");
        let theirs = truth[&path]["reason"].as_str().expect("torch's reason");
        let ours = doc["weights_only"]["reason"].as_str().expect("reason");
        assert!(ours.starts_with(theirs), "{path}: {ours:?} vs {theirs:?}");
        let out = tensorplay(&["audit", "--format", "json", "--fail-on", "never", &path]);
        let report: Value = serde_json::from_str(&stdout(&out)).expect("audit JSON");
        let tp505: Vec<&Value> = report["files"][0]["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["code"] == "TP505")
            .collect();
        let tp501 = report["files"][0]["findings"].to_string().contains("TP501");
        assert_eq!(
            (tp505.len(), tp501),
            (usize::from(!global), global),
            "{path}"
        );
        if let Some(f) = tp505.first() {
            assert_eq!(f["severity"], "warning");
            assert!(f["message"].as_str().unwrap().contains(theirs), "{path}");
        }
    }
    // A safetensors file is no file of torch.load's: no verdict, no finding.
    let st = json("fixtures/safetensors/all_dtypes.safetensors");
    assert!(st.get("weights_only").is_none(), "{st}");
}
