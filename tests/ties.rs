//! TP103 on the ties each producer writes: `fixtures/pytorch/tie_*.pt` and `slice_alias.pt`
//! (fixtures/make_pytorch.py), `fixtures/pt2/tied.pt2` (fixtures/make_pt2.py) and
//! `fixtures/models/lightning_monitored.ckpt` (fixtures/make_models.py). Its level follows
//! what the file shows of the tensor objects, and what it shows is what torch's own loader
//! gives back (the truths' `torch_ties`, `ties` and `same_object`).

use crate::common::{audit_json, read_json, stderr, strings, tensorplay};
use serde_json::Value;

/// A finding as compared here: code, severity, tensors, message.
type Found = (String, String, Vec<String>, String);

fn findings(path: &str) -> Vec<Found> {
    audit_json(path)["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let text = |k: &str| f[k].as_str().expect(k).to_owned();
            (
                text("code"),
                text("severity"),
                strings(&f["tensors"]),
                text("message"),
            )
        })
        .collect()
}

/// Name groups of a truth: lists of names.
fn groups(v: &Value) -> Vec<Vec<String>> {
    v.as_array().expect("groups").iter().map(strings).collect()
}

/// The names torch read over the one storage several tensors view.
fn shared_names(truth: &Value) -> Vec<String> {
    let shared: Vec<Vec<String>> = truth["inspect"]["storages"]
        .as_array()
        .expect("storages")
        .iter()
        .map(|s| strings(&s["tensors"]))
        .filter(|names| names.len() > 1)
        .collect();
    assert_eq!(shared.len(), 1, "{shared:?}");
    shared[0].clone()
}

/// A pickled tie's fixture, its level, what the message says, and the other findings (code
/// and severity) the file has.
type Case<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);

#[test]
fn each_producer_s_tie_is_judged_by_what_its_file_shows() {
    let cases: &[Case<'_>] = &[
        // state_dict() detaches every name: separate tensors, as slicing makes them.
        (
            "tie_state_dict.pt",
            "info",
            "separate tensors, as state_dict() saves a tie",
            &[],
        ),
        ("slice_alias.pt", "info", "the file cannot tell which", &[]),
        // The module's one Parameter, pickled once; the module classes are TP501's.
        (
            "tie_module.pt",
            "info",
            "are one tensor object over storage 0 (tied)",
            &[("TP501", "error"), ("TP501", "error")],
        ),
        // TorchScript pickles the one tensor once too; its code is TP504's.
        (
            "tie_scripted.pt",
            "info",
            "are one tensor object over storage 0 (tied)",
            &[("TP504", "warning")],
        ),
        (
            "tie_traced.pt",
            "info",
            "are one tensor object over storage 0 (tied)",
            &[("TP504", "warning")],
        ),
        // nn.Parameter(enc.weight.data): two Parameters, not a tie.
        (
            "tie_split.pt",
            "warning",
            "are 2 separate Parameters over one view of storage 0, not a tie",
            &[],
        ),
    ];
    for (file, severity, says, others) in cases {
        let path = format!("fixtures/pytorch/{file}");
        let truth = read_json(&format!("{path}.truth.json"));
        let names = shared_names(&truth);
        let found = findings(&path);
        let (ties, rest): (Vec<&Found>, Vec<&Found>) =
            found.iter().partition(|(code, ..)| code == "TP103");
        assert_eq!(ties.len(), 1, "{path}: {found:?}");
        let (_, level, tensors, message) = ties[0];
        assert_eq!(tensors, &names, "{path}");
        assert_eq!(level, severity, "{path}: {message}");
        assert!(message.contains(says), "{path}: {message}");
        let rest: Vec<(&str, &str)> = rest
            .iter()
            .map(|(code, level, ..)| (code.as_str(), level.as_str()))
            .collect();
        assert_eq!(rest, *others, "{path}");

        // What the finding says is what torch.load (torch.jit.load) gives back: one object
        // exactly where torch gives one, a warning exactly where it gives two Parameters.
        let torch = &truth["torch_ties"];
        let one = groups(&torch["same_object"]) == [names.clone()];
        assert_eq!(
            message.contains("one tensor object"),
            one,
            "{path}: {message}"
        );
        let parameters = torch["parameters"].as_u64().expect("parameters");
        assert_eq!(level == "warning", parameters >= 2, "{path}: {torch}");
    }

    // The state_dict's tie is the module's: load_state_dict keeps TiedPair's one Parameter,
    // whatever the file shares; assign=True takes the file's tensors, one Parameter each.
    let truth = read_json("fixtures/pytorch/tie_state_dict.pt.truth.json");
    let loaded = &truth["torch_ties"];
    assert_eq!(loaded["load_state_dict"]["parameters"], 1, "{loaded}");
    assert_eq!(
        loaded["load_state_dict_assign"]["parameters"], 2,
        "{loaded}"
    );
}

/// torch.export.save keeps one record for the tied weight and torch.export.load gives each
/// name a Parameter of its own: the archive cannot say the program held one object.
#[test]
fn an_exported_tie_is_info_as_the_archive_cannot_keep_the_object() {
    const PATH: &str = "fixtures/pt2/tied.pt2";
    let ties = &read_json("fixtures/pt2/truth.json")["ties"][PATH];
    let names = vec!["enc.weight".to_owned(), "dec.weight".to_owned()];
    assert_eq!(
        groups(&ties["exported_same_object"]),
        std::slice::from_ref(&names)
    );
    assert!(groups(&ties["loaded_same_object"]).is_empty(), "{ties}");
    assert_eq!(
        groups(&ties["loaded_same_storage"]),
        std::slice::from_ref(&names)
    );
    assert_eq!(ties["module_parameters"], 2);
    let found = findings(PATH);
    assert_eq!(found.len(), 1, "{found:?}");
    let (code, level, tensors, message) = &found[0];
    assert_eq!((code.as_str(), level.as_str()), ("TP103", "info"));
    assert_eq!(tensors, &names);
    assert!(
        message.ends_with(
            "(tied): a pt2 file records the shared bytes, not whether they were one tensor"
        ),
        "{message}"
    );
}

/// Lightning's ModelCheckpoint keeps each score tensor under several names: one object each,
/// as torch reads it, reported at info; the checkpoint passes a gate failing on warnings.
#[test]
fn a_monitored_lightning_checkpoint_s_scores_are_one_object_each() {
    const PATH: &str = "fixtures/models/lightning_monitored.ckpt";
    let truth = &read_json("fixtures/models/truth.json")[PATH];
    let mut want = groups(&truth["same_object"]);
    assert_eq!(want.len(), 2, "{want:?}");
    let found = findings(PATH);
    let mut got: Vec<Vec<String>> = Vec::new();
    for (code, level, tensors, message) in &found {
        assert_eq!(
            (code.as_str(), level.as_str()),
            ("TP103", "info"),
            "{message}"
        );
        assert!(message.contains("are one tensor object"), "{message}");
        got.push(tensors.clone());
    }
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // Scores, not weights: every name is the callback's.
    assert!(got
        .iter()
        .flatten()
        .all(|n| n.starts_with("callbacks.ModelCheckpoint{")));
}

/// A gate failing on warnings passes the ordinary ties and fails the separate Parameters.
#[test]
fn the_gate_fails_on_separate_parameters_only() {
    let code = |path: &str| {
        let out = tensorplay(&["audit", "--fail-on", "warning", path]);
        (out.status.code(), stderr(&out))
    };
    for path in [
        "fixtures/pytorch/tie_state_dict.pt",
        "fixtures/pytorch/slice_alias.pt",
        "fixtures/pytorch/tied_weights.pt",
        "fixtures/pt2/tied.pt2",
        "fixtures/models/lightning_monitored.ckpt",
    ] {
        assert_eq!(code(path).0, Some(0), "{path}: {}", code(path).1);
    }
    assert_eq!(code("fixtures/pytorch/tie_split.pt").0, Some(1));
}
