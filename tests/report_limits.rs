//! Every report of the whole fixtures tree (hostile files included) within what its consumer
//! accepts, and the JSON report, whole or partitioned and merged, valid against the published
//! schema `docs/report.schema.json`.

use crate::common::{root, stderr, tensorplay, TempDir};
use std::path::Path;
use tensorplay_audit::text::{MAX_MESSAGE_CHARS, MAX_NAME_CHARS};

/// GitLab refuses a JUnit report above 30 MB.
const JUNIT_MAX: u64 = 30_000_000;
/// GitHub code scanning refuses a SARIF upload above 10 MB (gzipped: this is stricter).
const SARIF_MAX: u64 = 10_000_000;
/// GitHub keeps 100 locations of a result (and rejects 1 000), 10 tags of a rule, 25 000
/// results of a run.
const SARIF_LOCATIONS: usize = 100;
const SARIF_TAGS: usize = 10;
const SARIF_RESULTS: usize = 25_000;
/// What a CI log shows comfortably: the human report of the whole tree.
const STDOUT_MAX: usize = 4 << 20;

pub fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(root().join("docs/report.schema.json")).expect("schema");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::validator_for(&schema).expect("a valid schema")
}

pub fn schema_errors(validator: &jsonschema::Validator, report: &serde_json::Value) -> Vec<String> {
    validator
        .iter_errors(report)
        .take(20)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

fn read(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

#[test]
fn every_report_of_the_fixtures_tree_fits_its_consumer() {
    let dir = TempDir::new("report-limits");
    let file = |name: &str| dir.0.join(name).to_str().expect("utf-8").to_owned();
    let (json, junit, sarif) = (file("r.json"), file("j.xml"), file("s.sarif"));
    let out = tensorplay(&[
        "audit",
        "--json",
        &json,
        "--junit",
        &junit,
        "--sarif",
        &sarif,
        "fixtures/",
    ]);
    // The fixtures hold hostile files: the run fails, but it runs to the end.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(out.stdout.len() < STDOUT_MAX, "{} bytes", out.stdout.len());
    assert!(
        size(Path::new(&junit)) < JUNIT_MAX,
        "{}",
        size(Path::new(&junit))
    );
    assert!(
        size(Path::new(&sarif)) < SARIF_MAX,
        "{}",
        size(Path::new(&sarif))
    );

    let log = read(Path::new(&sarif));
    let run = &log["runs"][0];
    let results = run["results"].as_array().expect("results");
    assert!(results.len() < SARIF_RESULTS, "{}", results.len());
    for rule in run["tool"]["driver"]["rules"].as_array().expect("rules") {
        let tags = rule["properties"]["tags"].as_array().expect("tags");
        assert!(!tags.is_empty() && tags.len() <= SARIF_TAGS, "{rule}");
    }

    let report = read(Path::new(&json));
    let errors = schema_errors(&validator(), &report);
    assert!(errors.is_empty(), "{errors:#?}");
}

/// `long_names.pt` ties 8 001 tensors in one finding (given the memory to relate them): the
/// JSON report lists every one, each name bounded, and SARIF keeps the first 100.
#[test]
fn a_finding_of_thousands_of_tensors_is_whole_in_json_and_capped_in_sarif() {
    let dir = TempDir::new("report-limits-wide");
    let file = |name: &str| dir.0.join(name).to_str().expect("utf-8").to_owned();
    let (json, sarif) = (file("r.json"), file("s.sarif"));
    let out = tensorplay(&[
        "audit",
        "--max-memory",
        "2GiB",
        "--fail-on",
        "never",
        "--json",
        &json,
        "--sarif",
        &sarif,
        "fixtures/hostile/fuzz/long_names.pt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = read(Path::new(&sarif));
    let most = log["runs"][0]["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            r["locations"][0]["logicalLocations"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .max();
    assert_eq!(most, Some(SARIF_LOCATIONS));
    let report = read(Path::new(&json));
    let errors = schema_errors(&validator(), &report);
    assert!(errors.is_empty(), "{errors:#?}");
    let widest = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .flat_map(|f| f["findings"].as_array().cloned().unwrap_or_default())
        .map(|f| f["tensors"].as_array().map_or(0, Vec::len))
        .max();
    assert_eq!(widest, Some(8001));
}

#[test]
fn the_schema_states_the_bounds_the_reports_apply_and_rejects_what_it_does_not_list() {
    let text = std::fs::read_to_string(root().join("docs/report.schema.json")).expect("schema");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let finding = &schema["$defs"]["finding"]["properties"];
    assert_eq!(finding["message"]["maxLength"], MAX_MESSAGE_CHARS);
    assert_eq!(finding["tensors"]["items"]["maxLength"], MAX_NAME_CHARS);

    let validator = validator();
    let out = tensorplay(&["audit", "--ci-mode", "fixtures/pytorch/multi_gpu.pt"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert!(schema_errors(&validator, &report).is_empty());
    let mut extra = report.clone();
    extra["files"][0]["findings"][0]["surprise"] = true.into();
    assert!(!schema_errors(&validator, &extra).is_empty());
    let mut wrong = report;
    wrong["files"][0]["findings"][0]["severity"] = "fatal".into();
    assert!(!schema_errors(&validator, &wrong).is_empty());
}

#[test]
fn partitioned_and_merged_reports_match_the_schema() {
    let dir = TempDir::new("report-schema-parts");
    let file = |name: &str| dir.0.join(name).to_str().expect("utf-8").to_owned();
    let parts = [file("p1.json"), file("p2.json")];
    for (k, part) in parts.iter().enumerate() {
        let share = format!("{}/2", k + 1);
        let out = tensorplay(&[
            "audit",
            "--partition",
            &share,
            "--gpu-budget",
            "1GiB",
            "--json",
            part,
            "fixtures/pytorch",
        ]);
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{}",
            stderr(&out)
        );
    }
    let merged = file("merged.json");
    let out = tensorplay(&["merge", "--json", &merged, &parts[0], &parts[1]]);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        stderr(&out)
    );
    let validator = validator();
    for path in parts.iter().chain([&merged]) {
        let report = read(Path::new(path));
        let errors = schema_errors(&validator, &report);
        assert!(errors.is_empty(), "{path}: {errors:#?}");
    }
    let part = read(Path::new(&parts[0]));
    assert_eq!(part["partition"]["k"], 1);
    // Which files a share holds moves with the fixture set; a file read (not one refused)
    // carries its budget.
    assert!(part["files"]
        .as_array()
        .expect("files")
        .iter()
        .any(|f| f["memory"]["budget_bytes"].is_u64()));
}
