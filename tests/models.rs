//! Checkpoints of real architectures, saved the way people save them (`fixtures/models/`,
//! made by `fixtures/make_models.py`): tensorplay reads them as torch does, and the gate
//! passes them unless the file really has the hazard.

use crate::common::{
    audit_report as audit, global_names, matches_inspect_truth, report_findings as findings,
    stderr, stdout, tensorplay, truth_by_path, TempConfig,
};
use serde_json::Value;

const TRUTH: &str = "fixtures/models/truth.json";

/// The ordinary files: architectures' state dicts, save_pretrained output, a default and a
/// monitored Lightning checkpoint.
const ORDINARY: &[&str] = &[
    "fixtures/models/resnet18.pt",
    "fixtures/models/mobilenet_v3_small.pt",
    "fixtures/models/bert/model.safetensors",
    "fixtures/models/gpt2/model.safetensors",
    "fixtures/models/llama/model.safetensors",
    "fixtures/models/bert_state_dict.pt",
    "fixtures/models/gpt2_state_dict.pt",
    "fixtures/models/llama_state_dict.pt",
    "fixtures/models/lightning.ckpt",
    "fixtures/models/lightning_monitored.ckpt",
];

/// The ties `torch.save(model.state_dict())` keeps (the input embedding is the output head).
const TIES: &[(&str, &[&str])] = &[
    (
        "fixtures/models/bert_state_dict.pt",
        &[
            "bert.embeddings.word_embeddings.weight",
            "cls.predictions.decoder.weight",
        ],
    ),
    (
        "fixtures/models/bert_state_dict.pt",
        &["cls.predictions.bias", "cls.predictions.decoder.bias"],
    ),
    (
        "fixtures/models/gpt2_state_dict.pt",
        &["transformer.wte.weight", "lm_head.weight"],
    ),
];

fn truth() -> serde_json::Map<String, Value> {
    truth_by_path(TRUTH)
}

fn message_of<'r>(report: &'r Value, code: &str, tensor: Option<&str>) -> &'r str {
    report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["code"] == code && tensor.is_none_or(|t| f["tensors"][0] == t))
        .and_then(|f| f["message"].as_str())
        .unwrap_or_else(|| panic!("no {code} finding in {report}"))
}

#[test]
fn inspect_reads_every_real_model_as_its_library_does() {
    let truth = truth();
    assert_eq!(truth.len(), 12, "{:?}", truth.keys());
    for (path, t) in &truth {
        matches_inspect_truth(path, t, TRUTH);
    }
}

#[test]
fn ordinary_models_pass_the_gate_with_nothing_above_info() {
    let mut args = vec!["--fail-on", "warning"];
    args.extend_from_slice(ORDINARY);
    let (code, report) = audit(&args);
    assert_eq!(code, Some(0), "{report}");
    let above_info: Vec<_> = findings(&report)
        .into_iter()
        .filter(|(_, _, severity, _)| severity != "info")
        .collect();
    assert!(above_info.is_empty(), "{above_info:?}");
    assert_eq!(report["summary"]["passed"], true);

    // The ties torch.save keeps are real and reported, at info: the ones transformers makes,
    // and the monitored Lightning checkpoint's scores, each one object under several names
    // as torch reads it.
    let tie = |path: &str, names: Vec<String>| {
        (
            path.to_owned(),
            "TP103".to_owned(),
            "info".to_owned(),
            names,
        )
    };
    let mut want: Vec<_> = TIES
        .iter()
        .map(|(path, names)| tie(path, names.iter().map(|n| (*n).to_owned()).collect()))
        .collect();
    const MONITORED: &str = "fixtures/models/lightning_monitored.ckpt";
    let scores = truth()[MONITORED]["same_object"].clone();
    for group in scores.as_array().expect("groups") {
        let names = group.as_array().expect("names").iter();
        want.push(tie(
            MONITORED,
            names
                .map(|n| n.as_str().expect("name").to_owned())
                .collect(),
        ));
    }
    let mut got: Vec<_> = findings(&report)
        .into_iter()
        .filter(|(_, code, _, _)| code == "TP103")
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);

    // Declared, they are not reported at all (the callback's state by a glob: its key holds
    // braces, which globs read as alternatives).
    let globs: Vec<String> = TIES
        .iter()
        .flat_map(|(_, names)| names.iter().map(|n| format!("\"{n}\"")))
        .chain(["\"callbacks.ModelCheckpoint*\"".to_owned()])
        .collect();
    let config = TempConfig::new(
        "ties",
        &format!("[tied_weights]\nallow = [{}]\n", globs.join(", ")),
    );
    let mut args = vec!["--config", config.path()];
    args.extend_from_slice(ORDINARY);
    let (_, report) = audit(&args);
    let ties: Vec<_> = findings(&report)
        .into_iter()
        .filter(|(_, code, _, _)| code == "TP103")
        .collect();
    assert!(ties.is_empty(), "{ties:?}");
}

#[test]
fn tp301_reports_ordinary_dispersion_at_info_with_its_score() {
    for (path, score) in [
        ("fixtures/models/resnet18.pt", "16.45"),
        ("fixtures/models/mobilenet_v3_small.pt", "52.94"),
    ] {
        let (code, report) = audit(&[path]);
        assert_eq!(code, Some(0));
        // The finding names the tensors of the largest storage (the first of equals), as
        // torch read the file.
        let storages = truth()[path]["inspect"]["storages"]
            .as_array()
            .expect("storages")
            .clone();
        let largest = storages
            .iter()
            .rev()
            .max_by_key(|s| s["nbytes"].as_u64())
            .expect("a storage");
        let tensors: Vec<String> = largest["tensors"]
            .as_array()
            .expect("tensors")
            .iter()
            .map(|t| t.as_str().expect("name").to_owned())
            .collect();
        assert_eq!(
            findings(&report),
            [(
                path.to_owned(),
                "TP301".to_owned(),
                "info".to_owned(),
                tensors
            )]
        );
        let message = message_of(&report, "TP301", None);
        assert!(
            message.contains(&format!("fragmentation score of {score} ")),
            "{message}"
        );
    }
    // Configured as a gate, it still fires there.
    let config = TempConfig::new("tp301", "[rules]\nTP301 = \"warning\"\n");
    let (code, report) = audit(&[
        "--config",
        config.path(),
        "--fail-on",
        "warning",
        "fixtures/models/resnet18.pt",
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(findings(&report)[0].2, "warning");
    let explain = stdout(&tensorplay(&["explain", "TP301"]));
    assert!(
        explain.contains("mobilenet_v3_small 52.9, resnet18 16.5"),
        "{explain}"
    );
}

#[test]
fn lightning_placeholders_are_info_and_a_nan_weight_still_fails() {
    let truth = truth();
    // What torch reads: the default ModelCheckpoint keeps `inf` as kth_value.
    let lightning = &truth["fixtures/models/lightning.ckpt"];
    let keys: Vec<&str> = lightning["top_level_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(keys.contains(&"pytorch-lightning_version") && keys.contains(&"callbacks"));
    let placeholder: Vec<&String> = lightning["non_finite"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(placeholder.len(), 1);
    let placeholder = placeholder[0].as_str();
    assert!(
        placeholder.starts_with("callbacks.ModelCheckpoint{")
            && placeholder.ends_with(".kth_value")
    );

    let (code, report) = audit(&["fixtures/models/lightning.ckpt"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(
        findings(&report),
        [(
            "fixtures/models/lightning.ckpt".to_owned(),
            "TP401".to_owned(),
            "info".to_owned(),
            vec![placeholder.to_owned()]
        )]
    );
    let message = message_of(&report, "TP401", None);
    assert!(
        message.contains("Lightning callback state (ModelCheckpoint)")
            && message.contains("placeholder score"),
        "{message}"
    );

    // The same run with a NaN written into a weight: that weight fails, the placeholder stays info.
    let nan = &truth["fixtures/models/lightning_nan.ckpt"]["non_finite"];
    assert_eq!(nan["state_dict.net.0.weight"]["nan"], 1);
    let (code, report) = audit(&["fixtures/models/lightning_nan.ckpt"]);
    assert_eq!(code, Some(1), "{report}");
    let mut got = findings(&report);
    got.sort();
    assert_eq!(
        got,
        [
            (
                "fixtures/models/lightning_nan.ckpt".to_owned(),
                "TP401".to_owned(),
                "error".to_owned(),
                vec!["state_dict.net.0.weight".to_owned()]
            ),
            (
                "fixtures/models/lightning_nan.ckpt".to_owned(),
                "TP401".to_owned(),
                "info".to_owned(),
                vec![placeholder.to_owned()]
            ),
        ]
    );
}

#[test]
fn a_training_checkpoint_with_namespace_and_numpy_passes_only_with_allow_globals() {
    const PATH: &str = "fixtures/models/train_args.pt";
    let truth = &truth()[PATH];
    // torch refuses it with weights_only=True, as tensorplay's gate does by default.
    assert!(truth["torch_weights_only_error"]
        .as_str()
        .expect("torch refuses it")
        .contains("Weights only load failed"));
    let named = global_names(&truth["inspect"]["unsafe_globals"]);
    assert_eq!(
        named,
        [
            "argparse.Namespace",
            "numpy._core.multiarray.scalar",
            "numpy.dtype"
        ]
    );

    let (code, report) = audit(&[PATH]);
    assert_eq!(code, Some(1));
    let messages: Vec<&str> = report["files"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert_eq!(f["code"], "TP501");
            f["message"].as_str().unwrap()
        })
        .collect();
    assert_eq!(messages.len(), 3);
    for (message, name) in messages.iter().zip(&named) {
        assert!(
            message.ends_with(&format!("[pickle] allow_globals = [\"{name}\"]")),
            "{message}"
        );
    }
    assert!(report["files"][0].get("allowed_globals").is_none());

    // Two of three allowed: the third still fails.
    let config = TempConfig::new(
        "two-globals",
        "[pickle]\nallow_globals = [\"argparse.Namespace\", \"numpy.dtype\"]\n",
    );
    let (code, report) = audit(&["--config", config.path(), PATH]);
    assert_eq!(code, Some(1));
    assert_eq!(
        findings(&report).len(),
        1,
        "{}",
        message_of(&report, "TP501", None)
    );
    assert!(message_of(&report, "TP501", None).contains("numpy._core.multiarray.scalar"));

    let quoted: Vec<String> = named.iter().map(|n| format!("\"{n}\"")).collect();
    let config = TempConfig::new(
        "globals",
        &format!("[pickle]\nallow_globals = [{}]\n", quoted.join(", ")),
    );
    let (code, report) = audit(&["--config", config.path(), PATH]);
    assert_eq!(code, Some(0), "{report}");
    assert!(findings(&report).is_empty(), "{report}");
    assert_eq!(
        report["files"][0]["allowed_globals"],
        serde_json::json!(named)
    );
    let out = tensorplay(&["audit", "--config", config.path(), PATH]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains(
            "allowed by [pickle] allow_globals (never executed): argparse.Namespace, numpy._core.multiarray.scalar, numpy.dtype"
        ),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_malformed_allow_globals_entry_is_a_config_error_with_its_line() {
    let config = TempConfig::new(
        "bad-globals",
        "[pickle]\nallow_globals = [\n  \"argparse.Namespace\",\n  \"numpy.*\",\n]\n",
    );
    let out = tensorplay(&[
        "audit",
        "--config",
        config.path(),
        "fixtures/models/train_args.pt",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(":4:") && err.contains("'numpy.*' is not an exact global name"),
        "{err}"
    );
}
