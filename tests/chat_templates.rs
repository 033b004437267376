//! Chat templates (TP701–TP706) against `fixtures/chat_templates/`: each template, hostile
//! or real, in every container (GGUF written by gguf-py, `tokenizer_config.json`,
//! `chat_template.jinja`, `chat_template.json`), judged as `truth.json` records; where each
//! finding says the template came from, and its hash as gguf-py reads it back.

use crate::common::{audit_report, read_json, root, stderr, tensorplay};
use std::collections::{BTreeMap, BTreeSet};

const DIR: &str = "fixtures/chat_templates";

/// (file, location) → the codes of the findings about that template, and its hash.
type Judged = BTreeMap<(String, Option<String>), (BTreeSet<String>, BTreeSet<String>)>;

fn judged(report: &serde_json::Value) -> Judged {
    let mut out = Judged::new();
    for file in report["files"].as_array().expect("files") {
        for f in file["findings"].as_array().expect("findings") {
            let Some(t) = f.get("template") else { continue };
            let key = (
                t["file"].as_str().expect("file").to_owned(),
                t["location"].as_str().map(str::to_owned),
            );
            let entry = out.entry(key).or_default();
            entry.0.insert(f["code"].as_str().expect("code").to_owned());
            entry
                .1
                .insert(t["sha256"].as_str().expect("sha256").to_owned());
            assert_eq!(
                f["payload"], t["sha256"],
                "the payload is the template's hash"
            );
        }
    }
    out
}

#[test]
fn every_fixture_template_in_every_container_is_judged_as_its_truth_says() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let (code, report) = audit_report(&["--fail-on", "never", DIR]);
    assert_eq!(code, Some(0));
    let found = judged(&report);
    let mut containers = 0;
    for t in truth["templates"].as_array().expect("templates") {
        let name = t["name"].as_str().expect("name");
        let want: BTreeSet<String> = t["codes"]
            .as_array()
            .expect("codes")
            .iter()
            .map(|c| c.as_str().expect("code").to_owned())
            .collect();
        assert_eq!(t["expect"] == "pass", want.is_empty(), "{name}");
        for place in t["in"].as_array().expect("in") {
            containers += 1;
            let key = (
                place["file"].as_str().expect("file").to_owned(),
                place["location"].as_str().map(str::to_owned),
            );
            match found.get(&key) {
                None => assert!(want.is_empty(), "{name}: nothing found at {key:?}"),
                Some((codes, hashes)) => {
                    assert_eq!(codes, &want, "{name} at {key:?}");
                    // As gguf-py read it back from the GGUF file, and of the text elsewhere.
                    assert_eq!(
                        hashes.iter().collect::<Vec<_>>(),
                        [t["sha256"].as_str().expect("sha256")],
                        "{name} at {key:?}"
                    );
                }
            }
        }
    }
    assert_eq!(containers, 104);
    // Every finding is about a template the truth lists: nothing else is reported.
    let listed: BTreeSet<(String, Option<String>)> = truth["templates"]
        .as_array()
        .expect("templates")
        .iter()
        .flat_map(|t| t["in"].as_array().expect("in").iter())
        .map(|p| {
            (
                p["file"].as_str().expect("file").to_owned(),
                p["location"].as_str().map(str::to_owned),
            )
        })
        .collect();
    for key in found.keys() {
        assert!(listed.contains(key), "unlisted {key:?}");
    }
}

#[test]
fn real_templates_pass_the_gate_and_a_payload_fails_it_in_each_container() {
    let out = tensorplay(&["audit", &format!("{DIR}/real")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for file in ["chat_template.jinja", "tokenizer_config.json", "model.gguf"] {
        let path = format!("{DIR}/hostile/lipsum_globals_os/{file}");
        let out = tensorplay(&["audit", &path]);
        assert_eq!(out.status.code(), Some(1), "{path}");
    }
}

#[test]
fn every_template_the_pinned_transformers_carries_passes_the_gate() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let shipped: Vec<&serde_json::Value> = truth["templates"]
        .as_array()
        .expect("templates")
        .iter()
        .filter(|t| {
            t["name"]
                .as_str()
                .expect("name")
                .starts_with("transformers/")
        })
        .collect();
    // Its tests' templates and its processors' defaults, `{% generation %}` among them.
    assert_eq!(shipped.len(), 13);
    assert_eq!(truth["transformers"], "4.57.6");
    for t in &shipped {
        // The sandbox renders each; the gate must pass each.
        assert_eq!(t["sandbox"], "ok", "{}", t["name"]);
        assert_eq!(t["expect"], "pass", "{}", t["name"]);
    }
    let out = tensorplay(&["audit", &format!("{DIR}/transformers")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (_, report) = audit_report(&[&format!("{DIR}/transformers")]);
    let files = report["files"].as_array().expect("files");
    assert_eq!(files.len(), 39);
    for file in files {
        assert_eq!(file["findings"], serde_json::json!([]), "{}", file["path"]);
    }
}

#[test]
fn a_template_file_is_read_by_its_name_alone_and_beside_a_checkpoint() {
    let (_, report) = audit_report(&["--fail-on", "never", &format!("{DIR}/named")]);
    let files: Vec<(&str, &str)> = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("path"),
                f["format"].as_str().expect("format"),
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            (
                "fixtures/chat_templates/named/chat_template.json",
                "chat-template"
            ),
            ("fixtures/chat_templates/named/model.gguf", "gguf"),
            (
                "fixtures/chat_templates/named/tokenizer_config.json",
                "chat-template"
            ),
        ]
    );
    // The same bytes under another name are no template file: JSON no loader takes.
    let dir = tempdir();
    let copy = dir.0.join("config.json");
    std::fs::copy(root().join(DIR).join("named/tokenizer_config.json"), &copy).unwrap();
    let (code, report) = audit_report(&["--allow-empty", copy.to_str().unwrap()]);
    assert_eq!(code, Some(0));
    assert_eq!(report["files"], serde_json::json!([]));
    assert_eq!(report["skipped"][0]["path"], copy.to_str().unwrap());
}

#[test]
fn sarif_carries_the_template_location_and_hash() {
    let dir = tempdir();
    let sarif = dir.0.join("r.sarif");
    let path = format!("{DIR}/named/tokenizer_config.json");
    let out = tensorplay(&["audit", "--sarif", sarif.to_str().unwrap(), &path]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sarif).unwrap()).unwrap();
    let results = doc["runs"][0]["results"].as_array().expect("results");
    let escape = results
        .iter()
        .find(|r| r["ruleId"] == "TP701")
        .expect("TP701");
    let template = &escape["properties"]["template"];
    assert_eq!(template["file"], path.as_str());
    assert_eq!(
        template["location"],
        "$.chat_template[1].template (name \"tool_use\")"
    );
    let truth = read_json(&format!("{DIR}/truth.json"));
    let tool_use = truth["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "named/tool_use")
        .unwrap();
    assert_eq!(template["sha256"], tool_use["sha256"]);
}

#[test]
fn the_template_baseline_fails_a_template_it_does_not_declare() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let sha = |name: &str| {
        truth["templates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["sha256"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let dir = tempdir();
    let baseline = dir.0.join("templates.sha256");
    std::fs::write(&baseline, format!("# served\n{}  phi3\n", sha("real/phi3"))).unwrap();
    let baseline = baseline.to_str().unwrap();
    let phi3 = format!("{DIR}/real/phi3/model.gguf");
    let out = tensorplay(&["audit", "--template-baseline", baseline, &phi3]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let gemma = format!("{DIR}/real/gemma2/model.gguf");
    let (code, report) = audit_report(&["--template-baseline", baseline, &gemma]);
    assert_eq!(code, Some(1));
    let finding = &report["files"][0]["findings"][0];
    assert_eq!(finding["code"], "TP706");
    assert!(finding["message"]
        .as_str()
        .unwrap()
        .contains(&sha("real/gemma2")));
    // A baseline that is not one is a usage error, before anything is read.
    std::fs::write(dir.0.join("bad"), "not-a-hash phi3\n").unwrap();
    let bad = dir.0.join("bad");
    let out = tensorplay(&["audit", "--template-baseline", bad.to_str().unwrap(), &phi3]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(":1: template baseline: 'not-a-hash' is not a SHA-256"));
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> TempDir {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tensorplay-chat-templates-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}
