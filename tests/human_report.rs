//! The human report groups what differs only in its subject (TP501's globals of one file, in
//! one entry with one hint) and ends with the count of findings per rule; the JSON, SARIF and
//! JUnit reports keep one result per global.

use crate::common::{stderr, stdout, tensorplay};

const DTENSOR: &str = "fixtures/torch215/dtensor.pt";
const OVERLAPPING: &str = "fixtures/pytorch/overlapping_params.pt";

#[test]
fn one_files_globals_are_one_entry_and_the_report_ends_with_counts_per_rule() {
    let dir = std::env::temp_dir().join(format!("tensorplay-grouped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = |name: &str| dir.join(name).to_str().expect("utf-8").to_owned();
    let (json, sarif, junit) = (file("r.json"), file("r.sarif"), file("r.xml"));
    let out = tensorplay(&[
        "audit",
        "--color",
        "never",
        "--json",
        &json,
        "--sarif",
        &sarif,
        "--junit",
        &junit,
        DTENSOR,
        OVERLAPPING,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();

    // dtensor.pt names six DTensor globals outside torch.load's table (its mesh layouts are
    // registered by `import torch`), all of the torch-distributed preset: one entry.
    let heads: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("  error[TP501]"))
        .collect();
    assert_eq!(heads.len(), 1, "{text}");
    let head = lines[heads[0]];
    assert!(
        head.starts_with(
            "  error[TP501] unsafe-global (6): loading with weights_only=False would import and call it; "
        ),
        "{head}"
    );
    assert_eq!(
        text.matches("allow_presets = [\"torch-distributed\"]")
            .count(),
        1,
        "{text}"
    );
    let subjects: Vec<&str> = lines[heads[0] + 1..]
        .iter()
        .take_while(|l| l.starts_with("    - "))
        .copied()
        .collect();
    assert_eq!(subjects.len(), 6, "{text}");
    assert_eq!(
        subjects[0],
        "    - dtensor/data.pkl at byte 95 references torch.distributed.tensor.DTensor"
    );
    assert!(subjects
        .iter()
        .all(|s| s.contains(" references torch.distributed.")));
    assert!(
        lines[heads[0] + 1 + subjects.len()].starts_with("    fix: do not load this file"),
        "{text}"
    );
    assert_eq!(
        text.matches("    fix: do not load this file").count(),
        1,
        "{text}"
    );
    // Findings that are not one subject's each keep their entry: TP102 twice.
    assert_eq!(
        text.matches("  error[TP102] grad-view: ").count(),
        2,
        "{text}"
    );

    // The verdict, then the closing line: most findings first, then by code.
    let n = lines.len();
    assert!(lines[n - 2].contains("FAILED (fail-on error)"), "{text}");
    assert_eq!(
        lines[n - 1],
        "6 TP501 unsafe-global, 2 TP102 grad-view, 1 TP101 view-overlap, \
         1 TP106 shared-storage; run `tensorplay explain CODE` for what a rule checks and how to fix it"
    );

    // The machine reports keep one result per global.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    let tp501 = |findings: &serde_json::Value| {
        findings
            .as_array()
            .expect("array")
            .iter()
            .filter(|f| f["code"] == "TP501")
            .count()
    };
    let files = report["files"].as_array().expect("files");
    let dtensor = files
        .iter()
        .find(|f| f["path"] == DTENSOR)
        .expect("dtensor.pt");
    assert_eq!(tp501(&dtensor["findings"]), 6);
    let sarif: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sarif).expect("sarif")).expect("sarif");
    let results = sarif["runs"][0]["results"].as_array().expect("results");
    assert_eq!(results.iter().filter(|r| r["ruleId"] == "TP501").count(), 6);
    let junit = std::fs::read_to_string(&junit).expect("junit");
    assert_eq!(
        junit
            .matches("error[TP501] unsafe-global: dtensor/data.pkl at byte")
            .count(),
        6
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_passing_report_ends_with_its_verdict() {
    let out = tensorplay(&[
        "audit",
        "--color",
        "never",
        "fixtures/pytorch/state_dict.pt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let last = text.lines().last().expect("a line");
    assert!(last.contains("passed (fail-on error)"), "{text}");
    assert!(!text.contains("tensorplay explain"), "{text}");
}
