//! The CI reports over one fixed set of fixtures: SARIF validated against the official
//! 2.1.0 schema, JUnit checked against what the Jenkins xUnit and Ant XSDs require, GitLab
//! Code Quality and GitHub annotations checked for what those servers read; each snapshotted.

use crate::common::{root, stderr, stdout};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A clean file, an error with a warning, a meta tensor (suppressed by a baseline), an unsafe
/// global, an unreadable file, a repeated identity (TP102 on `a, b` and `b, a`), and a folder
/// whose shards and truth files are skipped.
const FIXTURES: &[&str] = &[
    "fixtures/pytorch/multi_gpu.pt",
    "fixtures/pytorch/meta.pt",
    "fixtures/pytorch/payload_os_system.pt",
    "fixtures/pytorch/bad/truncated.pt",
    "fixtures/pytorch/overlapping_params.pt",
    "fixtures/pytorch/sharded",
];

/// Every report of one run over [`FIXTURES`], with `meta.pt`'s finding in a baseline.
struct Run {
    out: Output,
    dir: PathBuf,
}

impl Run {
    /// Runs in a fresh folder named after the test; `env` is added to a cleaned environment.
    fn new(test: &str, extra: &[&str], env: &[(&str, &Path)]) -> Run {
        let dir = std::env::temp_dir().join(format!("tensorplay-{test}-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir).expect("temp dir");
        let baseline = dir.join("baseline.json");
        let written = command(&[
            "audit",
            "--write-baseline",
            baseline.to_str().expect("utf-8"),
            "fixtures/pytorch/meta.pt",
        ])
        .output()
        .expect("runs");
        assert_eq!(written.status.code(), Some(0), "{}", stderr(&written));
        let files = [
            "report.json",
            "junit.xml",
            "report.sarif",
            "codequality.json",
        ]
        .map(|name| dir.join(name).to_str().expect("utf-8").to_owned());
        let mut args = vec![
            "audit",
            "--baseline",
            baseline.to_str().expect("utf-8"),
            "--json",
            &files[0],
            "--junit",
            &files[1],
            "--sarif",
            &files[2],
            "--gitlab-codequality",
            &files[3],
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(FIXTURES);
        let mut cmd = command(&args);
        for (key, value) in env {
            cmd.env(key, value);
        }
        let out = cmd.output().expect("runs");
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        Run { out, dir }
    }

    fn text(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn json(&self, name: &str) -> serde_json::Value {
        serde_json::from_str(&self.text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// tensorplay in the repository root with no CI variables inherited.
fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorplay"));
    cmd.args(args)
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("HOSTNAME");
    cmd
}

fn schema(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(root().join("tests/data").join(name)).expect(name);
    serde_json::from_str(&text).expect(name)
}

#[test]
fn sarif_is_valid_2_1_0_with_every_rule_and_baseline_identities() {
    let run = Run::new("sarif", &[], &[]);
    let sarif = run.json("report.sarif");
    let validator = jsonschema::validator_for(&schema("sarif-schema-2.1.0.json")).expect("schema");
    let errors: Vec<String> = validator
        .iter_errors(&sarif)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");

    let sarif_run = &sarif["runs"][0];
    let rules = sarif_run["tool"]["driver"]["rules"]
        .as_array()
        .expect("rules");
    let registry = tensorplay_audit::registry::RULES;
    assert_eq!(rules.len(), registry.len());
    for (rule, known) in rules.iter().zip(registry) {
        assert_eq!(rule["id"], known.code().as_str());
        assert_eq!(rule["name"], known.name());
        assert_eq!(rule["fullDescription"]["text"], known.doc());
        assert_eq!(rule["properties"]["tags"], serde_json::json!(known.tags()));
        // GitHub reads a security severity only on rules tagged `security`.
        let score = rule["properties"].get("security-severity");
        assert_eq!(
            score.is_some(),
            known.tags().contains(&"security"),
            "{rule}"
        );
    }
    // A pickle payload is a Critical alert (9.0 and above).
    let tp501 = rules.iter().find(|r| r["id"] == "TP501").expect("TP501");
    let score: f64 = tp501["properties"]["security-severity"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a score");
    assert!(score >= 9.0, "{score}");
    let results = sarif_run["results"].as_array().expect("results");
    let report = run.json("report.json");
    let findings: usize = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["findings"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(
        results.len(),
        findings + 1,
        "every finding and the suppressed one"
    );
    for result in results {
        let index = result["ruleIndex"].as_u64().expect("ruleIndex") as usize;
        assert_eq!(rules[index]["id"], result["ruleId"]);
    }
    // One fingerprint per result, even for findings a baseline cannot tell apart (TP102 on
    // `a, b` and `b, a`), and the same one the JSON report gives the finding.
    let fingerprints: Vec<&str> = results
        .iter()
        .map(|r| {
            r["partialFingerprints"]["tensorplay/v1"]
                .as_str()
                .expect("fingerprint")
        })
        .collect();
    assert_eq!(
        fingerprints.iter().collect::<HashSet<_>>().len(),
        results.len(),
        "{fingerprints:?}"
    );
    let in_json: HashSet<String> = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .flat_map(|f| ["findings", "suppressed"].map(|key| f[key].as_array().cloned()))
        .flatten()
        .flatten()
        .map(|f| f["fingerprint"].as_str().expect("fingerprint").to_owned())
        .collect();
    let in_sarif: HashSet<String> = fingerprints.iter().map(|f| (*f).to_owned()).collect();
    assert_eq!(in_json, in_sarif);

    // The suppressed finding carries the hash of the identity its baseline recorded.
    let suppressed: Vec<&serde_json::Value> = results
        .iter()
        .filter(|r| r.get("suppressions").is_some())
        .collect();
    assert_eq!(suppressed.len(), 1);
    assert_eq!(suppressed[0]["ruleId"], "TP204");
    assert_eq!(
        suppressed[0]["suppressions"][0]["kind"], "external",
        "{suppressed:?}"
    );
    let baseline = run.json("baseline.json");
    let known = &baseline["findings"][0];
    let message = known.get("message").cloned().unwrap_or_else(|| "".into());
    let recorded = serde_json::json!([known["path"], known["code"], known["tensors"], message]);
    let recorded = recorded.to_string();
    let hash: String = Sha256::digest(recorded.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(suppressed[0]["partialFingerprints"]["tensorplay/v1"], hash);

    let mut redacted = sarif.clone();
    redacted["runs"][0]["tool"]["driver"]["version"] = "[version]".into();
    insta::assert_json_snapshot!("sarif", redacted);
}

#[test]
fn gitlab_code_quality_has_one_unique_issue_per_finding() {
    let run = Run::new("codequality", &[], &[]);
    let issues = run.json("codequality.json");
    let issues = issues.as_array().expect("an array");
    let mut fingerprints = HashSet::new();
    let mut by_check: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for issue in issues {
        for key in ["description", "check_name", "fingerprint", "severity"] {
            assert!(
                issue[key].as_str().is_some_and(|s| !s.is_empty()),
                "{key}: {issue}"
            );
        }
        assert!(issue["location"]["path"].is_string(), "{issue}");
        assert_eq!(issue["location"]["lines"]["begin"], 1);
        let severity = issue["severity"].as_str().expect("severity");
        assert!(
            ["info", "minor", "major", "critical", "blocker"].contains(&severity),
            "{severity}"
        );
        assert!(
            fingerprints.insert(issue["fingerprint"].as_str().expect("fingerprint")),
            "GitLab keeps one issue per fingerprint: {issue}"
        );
        by_check
            .entry(issue["check_name"].as_str().expect("check").to_owned())
            .or_default()
            .push(severity);
    }
    assert_eq!(by_check["TP501 unsafe-global"], ["critical"]);
    // An error of a security rule is critical, as code scanning rates it Critical.
    assert_eq!(by_check["TP502 corrupt-file"], ["critical"]);
    assert_eq!(by_check["TP202 unexpected-device"], ["minor", "minor"]);
    assert_eq!(by_check["TP102 grad-view"].len(), 2);
    assert!(!by_check.contains_key("TP204 meta-tensor"), "suppressed");
    insta::assert_json_snapshot!("gitlab_codequality", run.json("codequality.json"));
}

#[test]
fn github_annotations_come_before_the_human_log_and_a_summary_is_written() {
    let dir = std::env::temp_dir().join(format!("tensorplay-summary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let summary = dir.join("summary.md");
    std::fs::write(&summary, "earlier step\n").expect("summary");
    let on = Path::new("true");
    let run = Run::new(
        "github",
        &[],
        &[("GITHUB_ACTIONS", on), ("GITHUB_STEP_SUMMARY", &summary)],
    );
    let log = stdout(&run.out);
    let annotations: Vec<&str> = log.lines().take_while(|l| l.starts_with("::")).collect();
    assert!(log
        .lines()
        .skip(annotations.len())
        .all(|l| !l.starts_with("::")));
    assert!(
        annotations.iter().any(|l| l.starts_with(
            "::error file=fixtures/pytorch/payload_os_system.pt,title=TP501 unsafe-global::"
        )),
        "{log}"
    );
    assert!(
        annotations.iter().any(|l| l.starts_with("::notice ")),
        "{log}"
    );
    // The verdict, then the counts per rule, close the log.
    let mut last = log.trim_end().lines().rev();
    assert!(
        last.next()
            .is_some_and(|l| l.contains("tensorplay explain CODE")),
        "{log}"
    );
    assert!(
        last.next()
            .is_some_and(|l| l.contains("FAILED (fail-on error)")),
        "the verdict closes the log, before the counts: {log}"
    );
    let text = std::fs::read_to_string(&summary).expect("summary");
    assert!(
        text.starts_with("earlier step\n### tensorplay audit: FAILED"),
        "{text}"
    );
    insta::assert_snapshot!("github_annotations", annotations.join("\n"));
    insta::assert_snapshot!("github_step_summary", text);
    std::fs::remove_dir_all(&dir).ok();

    // Outside Actions, and with --ci-mode inside, no annotations.
    let plain = Run::new("human", &[], &[]);
    assert!(!stdout(&plain.out).contains("::"), "{}", stdout(&plain.out));
    let json = Run::new("ci-mode", &["--ci-mode"], &[("GITHUB_ACTIONS", on)]);
    let from_stdout: serde_json::Value = serde_json::from_str(&stdout(&json.out)).expect("JSON");
    assert_eq!(from_stdout, json.json("report.json"));
}

#[test]
fn junit_meets_the_jenkins_and_ant_schemas_and_renders_findings() {
    let run = Run::new("junit", &[], &[]);
    let xml = run.text("junit.xml");
    check_junit_schemas(&xml);
    let doc = roxmltree::Document::parse(&xml).expect("well-formed");
    let cases: Vec<roxmltree::Node> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    for case in &cases {
        // Jenkins splits the class name at its last dot: the class is the checkpoint's path.
        let (package, class) = case
            .attribute("classname")
            .and_then(|c| c.rsplit_once('.'))
            .expect("classname");
        assert_eq!(package, "tensorplay");
        assert_eq!(
            class,
            case.attribute("file").expect("file").replace('.', "_")
        );
    }
    let case = |name: &str, file: &str| {
        cases
            .iter()
            .find(|c| c.attribute("name") == Some(name) && c.attribute("file") == Some(file))
            .unwrap_or_else(|| panic!("{name} in {file}"))
    };
    let failure = case(
        "TP501 unsafe-global",
        "fixtures/pytorch/payload_os_system.pt",
    )
    .first_element_child()
    .expect("failure");
    assert_eq!(failure.tag_name().name(), "failure");
    let body = failure.text().expect("a body");
    assert!(body.contains("references posix.system") && body.contains("\n  fix: "));
    // A warning below --fail-on is a skipped case whose body GitLab shows; its message is the
    // first finding's line and its system-out the findings, which is what Jenkins shows.
    let below = case("TP202 unexpected-device", "fixtures/pytorch/multi_gpu.pt");
    let warning = below.first_element_child().expect("skipped");
    assert_eq!(warning.tag_name().name(), "skipped");
    let body = warning.text().expect("body");
    assert!(body.contains("tensors: a\n"));
    let message = warning.attribute("message").expect("message");
    assert!(
        message.starts_with(
            "warning[TP202] unexpected-device: 1 storage (1 tensor) was saved from cuda:0"
        ) && message.ends_with(" (and 1 more) (not failing: below --fail-on error)"),
        "{message}"
    );
    let output = below
        .children()
        .find(|n| n.has_tag_name("system-out"))
        .expect("the case's system-out");
    assert_eq!(output.text(), Some(body));
    let known = case(
        "TP204 meta-tensor (suppressed by the baseline)",
        "fixtures/pytorch/meta.pt",
    );
    assert_eq!(
        known.first_element_child().map(|n| n.tag_name().name()),
        Some("skipped")
    );
    let shard = "fixtures/pytorch/sharded/pytorch_model-00001-of-00002.bin";
    assert_eq!(
        case(shard, shard)
            .first_element_child()
            .and_then(|n| n.attribute("message")),
        Some("shard of fixtures/pytorch/sharded/pytorch_model.bin.index.json")
    );
    junit_parser::from_reader(std::io::Cursor::new(xml.as_bytes())).expect("parses as JUnit");
    insta::assert_snapshot!("junit", redact(&redact(&xml, "timestamp"), "hostname"));
}

/// A suite's attributes that JUnit.xsd requires (junit-10.xsd requires fewer); both also
/// declare `skipped`.
const SUITE_REQUIRED: &[&str] = &[
    "id",
    "name",
    "package",
    "tests",
    "failures",
    "errors",
    "hostname",
    "timestamp",
    "time",
];

/// What the two XSDs in tests/data require of our documents (no XSD validator runs without
/// libxml2; `scripts/validate-junit.sh` runs xmllint where it is installed). Attributes
/// outside a schema are listed as our extensions, which JUnit readers ignore.
fn check_junit_schemas(xml: &str) {
    let doc = roxmltree::Document::parse(xml).expect("well-formed");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    // junit-10.xsd: name, time, tests, failures, errors; JUnit.xsd: none.
    attributes_within(
        root,
        &["name", "time", "tests", "failures", "errors"],
        &["skipped"],
    );
    let mut totals = [0usize; 3];
    for (id, suite) in root.children().filter(|n| n.is_element()).enumerate() {
        assert_eq!(suite.tag_name().name(), "testsuite");
        attributes_within(suite, &[SUITE_REQUIRED, &["skipped"]].concat(), &[]);
        for required in SUITE_REQUIRED {
            assert!(
                suite
                    .attribute(*required)
                    .is_some_and(|v| !v.trim().is_empty()),
                "testsuite needs {required}"
            );
        }
        assert_eq!(int(suite, "id"), id, "ids count from 0");
        assert!(is_timestamp(
            suite.attribute("timestamp").unwrap_or_default()
        ));
        assert!(suite.attribute("time").is_some_and(is_decimal));
        // JUnit.xsd's sequence: properties, testcase*, system-out, system-err.
        let children: Vec<&str> = suite
            .children()
            .filter(|n| n.is_element())
            .map(|n| n.tag_name().name())
            .collect();
        assert_eq!(children.first(), Some(&"properties"));
        assert_eq!(children[children.len() - 2..], ["system-out", "system-err"]);
        let cases: Vec<roxmltree::Node> = suite
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        assert_eq!(cases.len() + 3, children.len(), "{children:?}");
        for property in suite.descendants().filter(|n| n.has_tag_name("property")) {
            attributes_within(property, &["name", "value"], &[]);
            assert!(property.attribute("name").is_some_and(|v| !v.is_empty()));
            assert!(property.attribute("value").is_some());
        }
        let (mut failures, mut skipped) = (0, 0);
        for case in &cases {
            attributes_within(*case, &["name", "classname", "time"], &["file"]);
            for required in ["name", "classname", "time"] {
                assert!(
                    case.attribute(required).is_some(),
                    "testcase needs {required}"
                );
            }
            assert!(case.attribute("time").is_some_and(is_decimal));
            // JUnit.xsd: at most one of skipped / error / failure, nothing else; junit-10.xsd
            // also allows the case's own system-out, our extension after a skipped case.
            let mut inner: Vec<roxmltree::Node> =
                case.children().filter(|n| n.is_element()).collect();
            if inner.len() == 2 && inner[1].has_tag_name("system-out") {
                assert!(inner[0].has_tag_name("skipped"), "{inner:?}");
                assert!(inner[1].attributes().next().is_none());
                inner.pop();
            }
            assert!(inner.len() <= 1, "{inner:?}");
            if let Some(outcome) = inner.first() {
                match outcome.tag_name().name() {
                    "failure" => {
                        failures += 1;
                        attributes_within(*outcome, &["type", "message"], &[]);
                        assert!(outcome.attribute("type").is_some(), "failure needs type");
                    }
                    "skipped" => {
                        skipped += 1;
                        attributes_within(*outcome, &["message"], &[]);
                    }
                    other => panic!("unexpected <{other}>"),
                }
            }
        }
        assert_eq!(int(suite, "tests"), cases.len());
        assert_eq!(int(suite, "failures"), failures);
        assert_eq!(int(suite, "errors"), 0);
        assert_eq!(int(suite, "skipped"), skipped);
        for (total, n) in totals.iter_mut().zip([cases.len(), failures, skipped]) {
            *total += n;
        }
    }
    assert_eq!(
        [
            int(root, "tests"),
            int(root, "failures"),
            int(root, "skipped")
        ],
        totals
    );
}

/// Every attribute is one the schemas declare or one of our documented extensions.
fn attributes_within(node: roxmltree::Node, declared: &[&str], extensions: &[&str]) {
    for attr in node.attributes() {
        assert!(
            declared.contains(&attr.name()) || extensions.contains(&attr.name()),
            "<{}> {}",
            node.tag_name().name(),
            attr.name()
        );
    }
}

/// xs:int, as a count.
fn int(node: roxmltree::Node, name: &str) -> usize {
    node.attribute(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("<{}> {name} is not a count", node.tag_name().name()))
}

/// xs:decimal (and junit-10's SUREFIRE_TIME for the values we write).
fn is_decimal(text: &str) -> bool {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && fraction.bytes().all(|b| b.is_ascii_digit())
}

/// JUnit.xsd's ISO8601_DATETIME_PATTERN: `[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}`.
fn is_timestamp(text: &str) -> bool {
    let shape = "0000-00-00T00:00:00";
    text.len() == shape.len()
        && text.bytes().zip(shape.bytes()).all(|(t, s)| {
            if s == b'0' {
                t.is_ascii_digit()
            } else {
                t == s
            }
        })
}

/// `name="…"` with its value replaced by `[name]`.
fn redact(xml: &str, name: &str) -> String {
    let key = format!(" {name}=\"");
    let mut out = String::new();
    let mut rest = xml;
    while let Some(at) = rest.find(&key) {
        let value_start = at + key.len();
        let Some(len) = rest[value_start..].find('"') else {
            break;
        };
        out.push_str(&rest[..value_start]);
        out.push_str(&format!("[{name}]"));
        rest = &rest[value_start + len..];
    }
    out.push_str(rest);
    out
}

/// A step shows ten annotations a level: the rest are counted in one notice, and no
/// annotation or summary row lists more than ten names.
#[test]
fn github_annotations_and_the_summary_fit_a_step() {
    let dir = std::env::temp_dir().join(format!("tensorplay-gh-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let summary = dir.join("summary.md");
    let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(["audit", "--format", "github", "--fail-on", "never"])
        .args(["fixtures/hostile", "fixtures/hostile/fuzz/long_names.pt"])
        .current_dir(root())
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .expect("runs");
    let log = stdout(&out);
    let annotations: Vec<&str> = log.lines().take_while(|l| l.starts_with("::")).collect();
    for level in ["::error ", "::warning "] {
        let n = annotations.iter().filter(|l| l.starts_with(level)).count();
        assert!(n <= 10, "{n} {level}annotations");
    }
    let last = annotations.last().expect("annotations");
    assert!(
        last.starts_with("::notice title=tensorplay::") && last.contains("more errors"),
        "{last}"
    );
    assert!(
        annotations.iter().all(|l| l.len() < 16 << 10),
        "an annotation over 16 KiB"
    );
    let written = std::fs::read_to_string(&summary).expect("summary");
    assert!(
        written.len() < 1 << 20,
        "{} bytes: over GitHub's 1 MiB",
        written.len()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--format sarif` prints what `--sarif FILE` writes.
#[test]
fn sarif_on_stdout_is_the_sarif_file() {
    let run = Run::new("sarif-stdout", &["--format", "sarif"], &[]);
    let printed: serde_json::Value = serde_json::from_str(&stdout(&run.out)).expect("SARIF");
    assert_eq!(printed, run.json("report.sarif"));
    assert_eq!(printed["version"], "2.1.0");
}
