//! Keras files (TP711–TP716) against `fixtures/keras/`, written by Keras 3 itself: each judged
//! as `truth.json` records, a `.keras` archive Keras' `load_model(safe_mode=True)` loaded
//! passing and every file it refused failing; a legacy `.h5` file, whose config is not read,
//! fails whatever Keras does (TP716); a cut archive is refused.

use crate::common::{audit_report, read_json, root, stderr, tensorplay, TempDir};
use std::collections::BTreeSet;

const DIR: &str = "fixtures/keras";

#[test]
fn every_keras_fixture_is_judged_as_its_truth_says() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let (code, report) = audit_report(&["--fail-on", "never", DIR]);
    assert_eq!(code, Some(0));
    let files = report["files"].as_array().expect("files");
    let cases = truth["files"].as_object().expect("files");
    assert_eq!(files.len(), cases.len(), "one report per fixture");
    for (name, case) in cases {
        let path = format!("{DIR}/{name}");
        let file = files
            .iter()
            .find(|f| f["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{path} not in the report"));
        let legacy = name.ends_with(".h5");
        assert_eq!(
            file["format"],
            if legacy { "hdf5" } else { "keras" },
            "{path}"
        );
        let errors: BTreeSet<&str> = file["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["severity"] == "error")
            .map(|f| f["code"].as_str().expect("code"))
            .collect();
        let want: BTreeSet<&str> = case["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .map(|c| c.as_str().expect("rule"))
            .collect();
        assert_eq!(errors, want, "{path}");
        // The oracle: what Keras loaded passes, what it refused fails; an unread HDF5 file
        // fails closed either way.
        let loaded = case["safe_mode"]["loaded"].as_bool().expect("loaded");
        if legacy {
            assert_eq!(errors, BTreeSet::from(["TP716"]), "{path}");
            continue;
        }
        assert_eq!(loaded, errors.is_empty(), "{path}: Keras loaded={loaded}");
        let listed = file["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["code"] == "TP715" && f["severity"] == "info");
        assert!(listed, "{path}: the weights are listed as not read");
    }
}

#[test]
fn a_lambda_layer_is_named_by_its_path_and_the_exit_code_fails() {
    let lambda = format!("{DIR}/lambda.keras");
    let (code, report) = audit_report(&[&lambda]);
    assert_eq!(code, Some(1));
    let finding = report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["code"] == "TP711")
        .expect("TP711")
        .clone();
    let message = finding["message"].as_str().expect("message");
    assert!(
        message.contains("$.config.layers[1] (layer 'lambda')"),
        "{message}"
    );
    let (code, _) = audit_report(&[&format!("{DIR}/plain_functional.keras")]);
    assert_eq!(code, Some(0));
}

#[test]
fn a_cut_keras_archive_is_refused() {
    let bytes = std::fs::read(root().join(DIR).join("plain_sequential.keras")).expect("fixture");
    let dir = TempDir::new("keras-cut");
    let path = dir.0.join("cut.keras");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("write");
    let out = tensorplay(&["audit", "--format", "json", path.to_str().expect("path")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{text} {}", stderr(&out));
    assert!(
        text.contains("TP502") || out.status.code() == Some(2),
        "{text}"
    );
}

#[test]
fn every_keras_rule_is_explained() {
    for code in ["TP711", "TP712", "TP713", "TP714", "TP715", "TP716"] {
        let out = tensorplay(&["explain", code]);
        assert_eq!(out.status.code(), Some(0), "{code}: {}", stderr(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("keras"),
            "{code}"
        );
    }
}
