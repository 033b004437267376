//! Pickles read as CPython's C unpickler reads them (`fixtures/hostile/make_differential_pickle.py`,
//! truth recorded by `fuzz/differential/oracle_pickle.py`): a file discovery meets in a folder is
//! audited whenever CPython would run any of it, every global the C unpickler resolves is a
//! TP501, frames that the C and pure-Python unpicklers read differently are refused, and a file
//! that is safetensors and a pickle is read as its name's loader reads it, or refused.

use crate::common::{audit_json as audit, read_json};
use serde_json::Value;
use std::collections::BTreeSet;

const DIR: &str = "fixtures/hostile/differential/pickle";

/// The globals a file's TP501 findings name, and its codes.
fn globals_and_codes(file: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
    let findings = file["findings"].as_array().expect("findings");
    let codes = findings
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_owned())
        .collect();
    let globals = findings
        .iter()
        .filter(|f| f["code"] == "TP501")
        .filter_map(|f| f["message"].as_str()?.split(" references ").nth(1))
        .map(|rest| rest.split(':').next().unwrap().to_owned())
        .collect();
    (globals, codes)
}

fn truth_globals(t: &Value) -> BTreeSet<String> {
    t["c_unpickler_globals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_file_cpython_would_run_part_of_is_audited_in_a_folder_naming_its_globals() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let report = audit(&format!("{DIR}/walked"));
    assert_eq!(
        report["skipped"].as_array().map_or(0, Vec::len),
        0,
        "{report}"
    );
    let files = report["files"].as_array().expect("files");
    let walked: Vec<(&String, &Value)> = truth
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("walked/"))
        .collect();
    assert_eq!(files.len(), walked.len());
    for (rel, t) in walked {
        // What CPython did: it resolved the global, then refused an opcode.
        assert!(!truth_globals(t).is_empty(), "{rel}");
        assert!(t["c_unpickler_error"].is_string(), "{rel}");
        let path = format!("{DIR}/{rel}");
        let file = files
            .iter()
            .find(|f| f["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{path} not audited"));
        let (globals, codes) = globals_and_codes(file);
        assert_eq!(globals, truth_globals(t), "{rel}");
        assert!(
            codes.contains("TP502"),
            "{rel}: the broken stream is TP502 too"
        );
    }
}

#[test]
fn frames_are_read_as_the_c_unpickler_reads_them_and_disagreements_refused() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    for (name, refused) in [
        ("agrees.pkl", false),
        ("short_frame.pkl", true),
        ("nested_frame.pkl", true),
        ("long_frame.pkl", true),
        // A name line across the frame's end: C names os.em, not os.system.
        ("line_across_frame.pkl", true),
    ] {
        let rel = format!("framed/{name}");
        let t = &truth[&rel];
        let report = audit(&format!("{DIR}/{rel}"));
        let (globals, codes) = globals_and_codes(&report["files"][0]);
        // Every global the C unpickler resolved is named; the frame past the end is refused by
        // the C unpickler before anything runs, so it names none.
        assert!(truth_globals(t).is_subset(&globals), "{rel}: {globals:?}");
        assert_eq!(codes.contains("TP502"), refused, "{rel}: {codes:?}");
        assert_eq!(codes.contains("TP501"), !globals.is_empty(), "{rel}");
    }
    // The nested frame is where the two unpicklers part: C runs it, pure Python refuses.
    let nested = &truth["framed/nested_frame.pkl"];
    assert!(nested["c_unpickler_error"].is_null());
    assert!(nested["python_unpickler"]
        .as_str()
        .unwrap()
        .contains("new frame"));
}

/// Archives refused after, or beside, a pickle that calls os.system: the refusal names every
/// global the C unpickler resolves in any pickle member a reading could run.
#[test]
fn a_refused_archive_names_every_global_its_pickles_resolve() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    for name in ["persid_after_global.pt", "ambiguous_record.pt"] {
        let rel = format!("refused/{name}");
        let report = audit(&format!("{DIR}/{rel}"));
        let (globals, codes) = globals_and_codes(&report["files"][0]);
        let unsafe_in_truth: BTreeSet<String> = truth_globals(&truth[&rel])
            .into_iter()
            .filter(|g| !g.starts_with("torch.") && !g.starts_with("collections."))
            .collect();
        assert_eq!(globals, unsafe_in_truth, "{rel}");
        assert!(codes.contains("TP502"), "{rel}: {codes:?}");
    }
}

#[test]
fn a_safetensors_file_that_is_a_pickle_is_read_as_its_names_loader_reads_it_or_refused() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    // The same bytes: safe_open reads one U8 tensor, torch.load would run os.system.
    let safe = &truth["polyglot/model.safetensors"]["safe_open"];
    assert_eq!(safe["keys"], serde_json::json!(["x"]));
    for (name, format, refused) in [
        ("model.safetensors", Some("safetensors"), false),
        ("pytorch_model.bin", Some("pickle"), false),
        ("pytorch_model", None, true),
    ] {
        let rel = format!("polyglot/{name}");
        let report = audit(&format!("{DIR}/{rel}"));
        let file = &report["files"][0];
        assert_eq!(file["format"].as_str(), format, "{rel}");
        let (globals, codes) = globals_and_codes(file);
        // Read as safe_open reads it or not, the file is made to run its pickle somewhere.
        assert_eq!(globals, truth_globals(&truth[&rel]), "{rel}");
        let message = file["findings"].to_string();
        assert_eq!(
            message.contains("ambiguous format"),
            refused,
            "{rel}: {message}"
        );
        assert_eq!(codes.contains("TP502"), refused, "{rel}: {codes:?}");
    }
}
