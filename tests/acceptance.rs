//! A file is what every loader that accepts its bytes makes of it, whatever its name or first
//! bytes say: polyglots of two formats, every compressor joblib detects around each pickle
//! kind, first operands longer than any sniffing window, and controls no loader runs anything
//! from. Fixtures: `fixtures/hostile/acceptance/`, whose `truth.json` records what np.load,
//! joblib.load, pickle.load, torch.load, safe_open and GGUFReader each did with each file
//! (`fixtures/hostile/make_acceptance.py`). Whatever a loader ran code from must fail the
//! gate with a finding that names the global it ran, named alone or met in a directory; a
//! control is judged alike either way.

use crate::common::{read_json, root, stderr, stdout, tensorplay, TempDir};
use serde_json::Value;
use std::path::Path;

const DIR: &str = "fixtures/hostile/acceptance";

/// `truth.json`'s files: repository-relative path -> what each real loader did.
fn truth() -> serde_json::Map<String, Value> {
    read_json(&format!("{DIR}/truth.json"))["files"]
        .as_object()
        .expect("files")
        .clone()
}

/// The loaders that ran the file's payload.
fn ran_by(t: &Value) -> Vec<&str> {
    t["loaders"]
        .as_object()
        .expect("loaders")
        .iter()
        .filter(|(_, r)| r["ran_payload"] == true)
        .map(|(name, _)| name.as_str())
        .collect()
}

/// The files some loader ran the payload of, with the global the payload calls.
fn runs_code(truth: &serde_json::Map<String, Value>) -> Vec<(&String, &Value, &str)> {
    truth
        .iter()
        .filter(|(_, t)| !ran_by(t).is_empty())
        .map(|(path, t)| (path, t, t["payload"].as_str().expect("payload")))
        .collect()
}

fn controls(truth: &serde_json::Map<String, Value>) -> Vec<&String> {
    truth
        .iter()
        .filter(|(_, t)| t["control"] == true)
        .map(|(path, _)| path)
        .collect()
}

/// `tensorplay audit --format json ARGS`: exit code, report (none when it wrote none) and
/// stderr.
fn audit(args: &[&str]) -> (Option<i32>, Option<Value>, String) {
    let mut all = vec!["audit", "--format", "json"];
    all.extend_from_slice(args);
    let out = tensorplay(&all);
    (
        out.status.code(),
        serde_json::from_str(&stdout(&out)).ok(),
        stderr(&out),
    )
}

fn listed<'a>(report: &'a Value, list: &str, path: &str) -> Option<&'a Value> {
    report[list].as_array()?.iter().find(|f| f["path"] == path)
}

/// What the report says of `path`, in one line: its format and findings, or why it was
/// skipped.
fn said(report: &Value, path: &str) -> String {
    if let Some(s) = listed(report, "skipped", path) {
        return format!("skipped: {}", s["reason"].as_str().unwrap_or_default());
    }
    let Some(file) = listed(report, "files", path) else {
        return "not in the report".into();
    };
    let findings: Vec<String> = file["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let g = &f["global"];
            let what = match g["module"].as_str() {
                Some(m) => format!("{m}.{}", g["name"].as_str().unwrap_or_default()),
                None => {
                    let m = f["message"].as_str().unwrap_or_default();
                    let m = m.strip_prefix(path).unwrap_or(m);
                    m.chars().take(110).collect()
                }
            };
            format!(
                "{} {} {what}",
                f["code"].as_str().unwrap_or("?"),
                f["severity"].as_str().unwrap_or("?")
            )
        })
        .collect();
    format!(
        "read as {}; findings: [{}]",
        file["format"].as_str().unwrap_or("nothing"),
        findings.join("; ")
    )
}

/// Ok when the report has `path` with an error that names `global`: TP501's global, or the
/// message of a refusal (TP502) that names what it refuses.
fn names_global(report: &Value, path: &str, payload: &str) -> Result<(), String> {
    let file = listed(report, "files", path).ok_or_else(|| said(report, path))?;
    let named = file["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .any(|f| {
            let g = &f["global"];
            let global = format!(
                "{}.{}",
                g["module"].as_str().unwrap_or_default(),
                g["name"].as_str().unwrap_or_default()
            );
            f["severity"] == "error"
                && ((f["code"] == "TP501" && global == payload)
                    || f["message"].as_str().is_some_and(|m| m.contains(payload)))
        });
    match named {
        true => Ok(()),
        false => Err(said(report, path)),
    }
}

/// Ok when the audit fails the gate (exit 1) naming `payload` for `path`.
fn fails_naming(
    (code, report, err): &(Option<i32>, Option<Value>, String),
    path: &str,
    payload: &str,
) -> Result<(), String> {
    let Some(report) = report else {
        return Err(format!("exit {code:?}, no report: {}", err.trim()));
    };
    names_global(report, path, payload).map_err(|s| format!("exit {code:?}, {s}"))?;
    match code {
        Some(1) => Ok(()),
        _ => Err(format!("exit {code:?}, {}", said(report, path))),
    }
}

/// One line per file the gate gets wrong: what the real loaders did, what tensorplay did.
fn wrong_line(path: &str, t: &Value, tensorplay: &str) -> String {
    format!(
        "{path} ({}): {} ran {}; tensorplay: {tensorplay}",
        t["kind"].as_str().unwrap_or_default(),
        ran_by(t).join(", "),
        t["payload"].as_str().unwrap_or_default()
    )
}

#[test]
fn the_truth_covers_the_folder_and_holds_together() {
    let truth = truth();
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join(DIR))
        .expect(DIR)
        .map(|e| format!("{DIR}/{}", e.expect("entry").file_name().to_string_lossy()))
        .filter(|p| !p.ends_with("/truth.json"))
        .collect();
    on_disk.sort();
    let recorded: Vec<String> = truth.keys().cloned().collect();
    assert_eq!(
        on_disk, recorded,
        "every file has a truth, every truth a file"
    );
    for (path, t) in &truth {
        let loaders = t["loaders"].as_object().expect("loaders");
        assert_eq!(
            loaders.len(),
            6,
            "{path}: np.load, joblib.load, pickle.load, torch.load, safe_open, GGUFReader"
        );
        for (loader, r) in loaders {
            if r["ran_payload"] == true {
                // The recording saw what the real loader ran.
                let globals: Vec<&str> = r["globals"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(Value::as_str)
                    .collect();
                assert!(
                    globals.contains(&t["payload"].as_str().unwrap()),
                    "{path}: {loader}: {globals:?}"
                );
            }
        }
        if t["control"] == true {
            assert!(ran_by(t).is_empty(), "{path}");
            assert!(
                loaders
                    .values()
                    .all(|r| r["globals"] == serde_json::json!([])),
                "{path}"
            );
        }
    }
    assert!(runs_code(&truth).len() >= 40, "{}", runs_code(&truth).len());
    assert_eq!(controls(&truth).len(), 4);
    // Some loader accepts a control's bytes (np.load opens any zip, pickle.load reads `N.`):
    // accepting is not running code.
    let accepted = |p: &str| truth[&format!("{DIR}/{p}")]["loaders"]["np.load"]["accepts"] == true;
    assert!(accepted("docs") && accepted("NOTES"));
}

#[test]
fn every_file_a_loader_runs_code_from_fails_the_gate_naming_what_it_runs() {
    let truth = truth();
    let files = runs_code(&truth);
    let mut wrong = Vec::new();
    for (path, t, payload) in &files {
        let run = audit(&["--fail-on", "error", path]);
        if let Err(why) = fails_naming(&run, path, payload) {
            wrong.push(wrong_line(path, t, &why));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} files a loader runs code from do not fail naming its global:\n{}",
        wrong.len(),
        files.len(),
        wrong.join("\n")
    );
}

/// Loaders with no allowlist: every global they resolve is one they import.
const IMPORT_ANY: [&str; 3] = ["np.load", "joblib.load", "pickle.load"];

#[test]
fn every_global_a_loader_without_an_allowlist_resolves_is_named() {
    let truth = truth();
    let mut wrong = Vec::new();
    for (path, t, _) in runs_code(&truth) {
        let run = audit(&["--fail-on", "error", path]);
        let Some(report) = &run.1 else {
            wrong.push(format!("{path}: exit {:?}, no report", run.0));
            continue;
        };
        for loader in IMPORT_ANY {
            for global in t["loaders"][loader]["globals"].as_array().expect("globals") {
                let global = global.as_str().expect("global");
                if names_global(report, path, global).is_err() {
                    wrong.push(format!(
                        "{path}: {loader} resolves {global}; {}",
                        said(report, path)
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "globals a loader resolves, not named:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn alone_in_a_directory_under_a_bare_name_each_is_audited_and_fails() {
    let truth = truth();
    let files = runs_code(&truth);
    let mut wrong = Vec::new();
    for (i, (path, t, payload)) in files.iter().enumerate() {
        let dir = TempDir::new(&format!("acceptance-alone-{i}"));
        let target = dir.0.join("blob");
        std::fs::copy(root().join(path), &target).expect("copy");
        let d = dir.0.to_str().expect("utf-8");
        // --allow-empty: a folder whose one file is skipped is reported, not refused.
        let run = audit(&["--fail-on", "error", "--allow-empty", d]);
        if let Err(why) = fails_naming(&run, target.to_str().unwrap(), payload) {
            wrong.push(wrong_line(path, t, &why));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} files a loader runs code from, met alone in a folder as `blob`, do not fail naming its global:\n{}",
        wrong.len(),
        files.len(),
        wrong.join("\n")
    );
}

/// Whether some loader accepts the file's bytes (`docs`: np.load opens any zip; `NOTES`:
/// pickle.load reads `N.` as None), though none runs anything from it.
fn accepted(t: &Value) -> bool {
    t["loaders"]
        .as_object()
        .expect("loaders")
        .values()
        .any(|r| r["accepts"] == true)
}

/// What the gate may make of a control: skipped when no loader accepts it; audited when one
/// does (never skipped), naming no global, since none runs. `NOTES` (a pickle of None, then
/// prose) passes; `docs` (a zip of text, np.load's `NpzFile` of raw bytes) fails closed
/// (TP502): tensorplay reads a zip as torch's archive or an `.npz` of arrays only.
fn judged_as_control(report: &Value, path: &str, t: &Value) -> Result<(), String> {
    let skipped = listed(report, "skipped", path).is_some();
    let file = listed(report, "files", path);
    let names_global = file.is_some_and(|f| {
        f["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["code"] == "TP501")
    });
    match (accepted(t), skipped, file.is_some()) {
        (false, true, false) => Ok(()),
        (true, false, true) if !names_global => Ok(()),
        _ => Err(said(report, path)),
    }
}

#[test]
fn walking_the_folder_fails_every_file_a_loader_runs_code_from_and_judges_the_controls() {
    let truth = truth();
    let (code, report, err) = audit(&["--fail-on", "error", DIR]);
    assert_eq!(code, Some(1), "{err}");
    let report = report.expect("a report");
    let mut wrong = Vec::new();
    for (path, t, payload) in runs_code(&truth) {
        if let Err(why) = names_global(&report, path, payload) {
            wrong.push(wrong_line(path, t, &why));
        }
    }
    for path in controls(&truth) {
        if let Err(why) = judged_as_control(&report, path, &truth[path]) {
            wrong.push(format!("{path} (control): {why}"));
        }
    }
    assert!(listed(&report, "skipped", &format!("{DIR}/truth.json")).is_some());
    assert!(wrong.is_empty(), "walking {DIR}:\n{}", wrong.join("\n"));
}

/// A control named on the command line is judged as the same file met alone in a folder:
/// skipped both ways when no loader accepts it (and the run passes), audited both ways, with
/// one verdict, when one does.
#[test]
fn a_control_is_judged_alike_named_or_walked() {
    let truth = truth();
    let mut wrong = Vec::new();
    for (i, path) in controls(&truth).into_iter().enumerate() {
        let t = &truth[path];
        let dir = TempDir::new(&format!("acceptance-control-{i}"));
        let name = Path::new(path).file_name().unwrap();
        std::fs::copy(root().join(path), dir.0.join(name)).expect("copy");
        let d = dir.0.to_str().expect("utf-8");
        let target = format!("{d}/{}", name.to_string_lossy());
        let walked = audit(&["--fail-on", "error", "--allow-empty", d]);
        let named = audit(&["--fail-on", "error", path]);
        for ((code, report, err), shown) in [(&walked, target.as_str()), (&named, path.as_str())] {
            match report {
                Some(r) => {
                    if let Err(why) = judged_as_control(r, shown, t) {
                        wrong.push(format!("{shown}: exit {code:?}, {why}"));
                    }
                }
                None => wrong.push(format!("{shown}: exit {code:?}, no report: {}", err.trim())),
            }
        }
        if walked.0 != named.0 {
            wrong.push(format!(
                "{path}: exit {:?} walked, {:?} named",
                walked.0, named.0
            ));
        }
        if !accepted(t) && named.0 != Some(0) {
            wrong.push(format!(
                "{path}: no loader accepts it, yet exit {:?}",
                named.0
            ));
        }
    }
    assert!(wrong.is_empty(), "controls:\n{}", wrong.join("\n"));
}
