//! The public 2025–26 bypass techniques peers fell to (`fixtures/hostile/bypass/`, made by
//! `fixtures/hostile/make_bypass.py`; `truth.json` records what torch 2.9.1's loaders and
//! `pickle.load` did with each). A file whose payload ran under some loader, or whose loader
//! imported a global outside torch's weights_only allowlist, must fail the gate naming one of
//! those globals, by its own name and under an extension-less name in a folder; every other
//! file must do what its truth's `expect` says.

use crate::common::{audit_report, read_json, TempDir};
use serde_json::Value;
use std::collections::BTreeSet;

const DIR: &str = "fixtures/hostile/bypass";

fn truth() -> Vec<(String, Value)> {
    read_json(&format!("{DIR}/truth.json"))["files"]
        .as_object()
        .expect("files")
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

/// Whether a real loader runs this file's code or imports a global it should not: then the
/// gate must name what it imported.
fn must_name_globals(t: &Value) -> bool {
    t["runs_code"] == true || !strings(&t["unsafe_imported"]).is_empty()
}

/// The globals a report's error findings name among `candidates`: a TP501's `global`, or a
/// candidate a refusal's message spells out.
fn named(report: &Value, candidates: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for file in report["files"].as_array().expect("files") {
        for f in file["findings"].as_array().expect("findings") {
            if f["severity"] != "error" {
                continue;
            }
            if f["code"] == "TP501" {
                let part = |k: &str| f["global"][k].as_str().unwrap_or_default().to_owned();
                out.insert(format!("{}.{}", part("module"), part("name")));
            } else {
                let message = f["message"].as_str().unwrap_or_default();
                out.extend(
                    candidates
                        .iter()
                        .filter(|c| message.contains(c.as_str()))
                        .cloned(),
                );
            }
        }
    }
    out.retain(|g| candidates.contains(g));
    out
}

/// The error codes of a report, for failure messages.
fn codes(report: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for file in report["files"].as_array().expect("files") {
        for f in file["findings"].as_array().expect("findings") {
            if f["severity"] == "error" {
                out.push(format!("{} {}", f["code"], f["message"]));
            }
        }
    }
    out
}

/// `audit --format json --fail-on error PATH`, checked against `expect` (exit code, and one of
/// the globals when it lists any); the problem, if any.
fn check(path: &str, rel: &str, expect: &Value) -> Option<String> {
    let (code, report) = audit_report(&["--fail-on", "error", path]);
    let audited = report["files"].as_array().map_or(0, Vec::len);
    if audited != 1 {
        return Some(format!("{rel}: {audited} files audited: {report}"));
    }
    let want = expect["exit"].as_i64().map(|c| c as i32);
    if code != want {
        return Some(format!(
            "{rel}: exit {code:?}, want {want:?}: {:?}",
            codes(&report)
        ));
    }
    let candidates = strings(&expect["names_any_of"]);
    if !candidates.is_empty() && named(&report, &candidates).is_empty() {
        return Some(format!(
            "{rel}: names none of {candidates:?}: {:?}",
            codes(&report)
        ));
    }
    None
}

fn fail_on(problems: Vec<String>) {
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_fixture_has_a_truth_and_both_kinds_are_there() {
    let truth = truth();
    let listed: BTreeSet<String> = truth.iter().map(|(k, _)| k.clone()).collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(crate::common::root().join(DIR))
        .expect("fixture folder")
        .map(|e| format!("{DIR}/{}", e.expect("entry").file_name().to_string_lossy()))
        .filter(|p| !p.ends_with("/truth.json"))
        .collect();
    assert_eq!(listed, on_disk);
    // Code runs under a real loader for most files; some run nothing anywhere.
    assert!(truth.iter().any(|(_, t)| t["runs_code"] == true));
    assert!(truth.iter().any(|(_, t)| !must_name_globals(t)));
    for (rel, t) in &truth {
        let ran = t["loaders"]
            .as_object()
            .expect("loaders")
            .values()
            .any(|r| r["payload_ran"] == true);
        assert_eq!(t["runs_code"] == true, ran, "{rel}");
        if must_name_globals(t) {
            // A payload can only run through a global the loader imported.
            assert!(!strings(&t["unsafe_imported"]).is_empty(), "{rel}");
            assert_eq!(t["expect"]["names_any_of"], t["unsafe_imported"], "{rel}");
        }
        // weights_only imports nothing, so it never runs a payload.
        assert_eq!(
            t["loaders"]["torch_load_weights_only"]["payload_ran"], false,
            "{rel}"
        );
    }
}

#[test]
fn a_file_a_loader_runs_or_imports_from_fails_naming_a_global_it_imported() {
    let problems = truth()
        .iter()
        .filter(|(_, t)| must_name_globals(t))
        .filter_map(|(rel, t)| check(rel, rel, &t["expect"]))
        .collect();
    fail_on(problems);
}

#[test]
fn the_same_file_in_a_folder_without_an_extension_fails_the_same_way() {
    let mut problems = Vec::new();
    for (rel, t) in truth() {
        // Discovery meets it as `checkpoint`: no extension says what it is.
        let name = rel.rsplit('/').next().expect("file name").to_owned();
        let dir = TempDir::new(&format!("bypass-{name}"));
        std::fs::copy(crate::common::root().join(&rel), dir.0.join("checkpoint")).expect("copy");
        let path = dir.0.to_str().expect("utf-8 path");
        problems.extend(check(
            path,
            &format!("{rel} as {path}/checkpoint"),
            &t["expect"],
        ));
    }
    fail_on(problems);
}

#[test]
fn a_file_no_loader_runs_does_what_its_truth_expects() {
    let problems = truth()
        .iter()
        .filter(|(_, t)| !must_name_globals(t))
        .filter_map(|(rel, t)| {
            assert!(t["expect"]["why"].is_string(), "{rel}: no reason recorded");
            check(rel, rel, &t["expect"])
        })
        .collect();
    fail_on(problems);
}

/// Beyond one name: when the gate reads the file through (no refusal), every global a real
/// loader imported is a TP501 of its own.
#[test]
fn a_file_read_through_names_every_global_a_loader_imported() {
    let mut problems = Vec::new();
    for (rel, t) in truth().iter().filter(|(_, t)| must_name_globals(t)) {
        let (_, report) = audit_report(&["--fail-on", "error", rel]);
        let refused = codes(&report).iter().any(|c| !c.starts_with("\"TP501\""));
        if refused {
            continue;
        }
        let imported = strings(&t["unsafe_imported"]);
        let missing: Vec<&String> = imported
            .iter()
            .filter(|g| !named(&report, &imported).contains(*g))
            .collect();
        if !missing.is_empty() {
            problems.push(format!("{rel}: no TP501 for {missing:?}"));
        }
    }
    fail_on(problems);
}
