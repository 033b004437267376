//! Names from a file cannot rewrite the log that reports them: tensor names, metadata and
//! location strings holding carriage returns, ANSI sequences or bidi overrides (written by
//! the real libraries, fixtures/hostile/names/) reach the terminal escaped, in every text
//! output.

use crate::common::{read_json, stderr, stdout, tensorplay};

const DIR: &str = "fixtures/hostile/names";

/// A control character or an invisible format character, as a terminal would act on it.
fn acts_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn assert_clean(what: &str, text: &str) {
    let bad: Vec<char> = text.chars().filter(|c| acts_on_terminal(*c)).collect();
    assert!(bad.is_empty(), "{what}: {bad:?} in\n{text}");
}

#[test]
fn the_libraries_read_the_crafted_names_back_verbatim() {
    let truth = read_json(&format!("{DIR}/truth.json"));
    let names = truth["crafted_names.safetensors"]["names"]
        .as_array()
        .unwrap();
    assert!(names.iter().any(|n| n.as_str().unwrap().contains('\r')));
    assert!(names.iter().any(|n| n.as_str().unwrap().contains('\u{1b}')));
}

#[test]
fn the_audit_log_escapes_what_the_file_names() {
    let out = tensorplay(&["audit", "--color", "never", DIR]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let log = stdout(&out);
    assert_clean("audit", &log);
    // The findings are there, naming the tensors in escaped form, and the verdict and the
    // counts per rule are the tool's own last lines.
    assert!(log.contains("'w\\u{d}PASSED: 0 errors'"), "{log}");
    assert!(log.contains("cuda:0\\u{1b}[2K"), "{log}");
    let mut last = log.trim_end().lines().rev();
    assert!(
        last.next()
            .unwrap()
            .contains("run `tensorplay explain CODE`"),
        "{log}"
    );
    assert!(last.next().unwrap().contains("FAILED"), "{log}");
}

#[test]
fn inspect_views_diff_and_convert_escape_what_the_file_names() {
    for file in ["crafted_names.safetensors", "crafted_names.pt"] {
        let path = format!("{DIR}/{file}");
        for args in [
            vec!["inspect", path.as_str()],
            vec!["views", path.as_str()],
            vec!["diff", path.as_str(), "fixtures/diff/base.pt"],
            vec![
                "diff",
                "--format",
                "markdown",
                path.as_str(),
                "fixtures/diff/base.pt",
            ],
        ] {
            let out = tensorplay(&args);
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
            assert_clean(&format!("{args:?}"), &stdout(&out));
        }
        // The escaped form is still there to read.
        let out = tensorplay(&["inspect", path.as_str()]);
        assert!(
            stdout(&out).contains("w\\u{d}PASSED: 0 errors"),
            "{}",
            stdout(&out)
        );
    }
    let out = tensorplay(&[
        "convert",
        &format!("{DIR}/crafted_names.safetensors"),
        "/nonexistent/x.safetensors",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_clean("convert", &stderr(&out));
}

/// On GitHub Actions a log line starting `::` (after blanks) is a workflow command: a file
/// named like one, holding names with control and bidi characters, leaves only tensorplay's
/// own annotations as commands, each carrying the names as escaped data.
#[test]
fn the_github_log_runs_no_command_a_file_names() {
    let dir = crate::common::TempDir::new("command-names");
    let named = dir.0.join("::warning title=X::f.safetensors");
    let source = crate::common::root()
        .join(DIR)
        .join("crafted_names.safetensors");
    std::fs::copy(source, &named).expect("copy");
    // Named as given, relative to the job's folder: the report's line starts with the name.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(["audit", "--format", "github", "--fail-on", "never"])
        .arg("::warning title=X::f.safetensors")
        .current_dir(&dir.0)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = stdout(&out);
    let commands: Vec<&str> = log
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("::") || l.starts_with("##["))
        .collect();
    assert!(!commands.is_empty(), "{log}");
    for command in &commands {
        assert!(
            [
                "::error file=",
                "::warning file=",
                "::notice file=",
                "::notice title=tensorplay::"
            ]
            .iter()
            .any(|own| command.starts_with(own)),
            "{command}"
        );
        assert_clean("annotation", command);
        assert!(!command.contains("title=X::"), "{command}");
    }
    // The report names the file at the start of a line, its first character escaped.
    assert!(
        log.lines()
            .any(|l| l.starts_with("\\u{3a}:warning title=X::f.safetensors (")),
        "{log}"
    );
    assert_clean("github log", &log);
}

/// A file named with every sink's special characters, holding crafted tensor names, reaches
/// each report as plain data: JUnit (XML) and the HTML page parse, and give the name back;
/// JSON and SARIF give it back exactly; the Markdown summary escapes each special character.
#[test]
fn every_sink_carries_a_crafted_name_as_data() {
    let dir = crate::common::TempDir::new("sink-names");
    let name = "a<b>&'q\"|*_[x](y)`#~!::%0A%.safetensors";
    let source = crate::common::root()
        .join(DIR)
        .join("crafted_names.safetensors");
    std::fs::copy(source, dir.0.join(name)).expect("copy");
    let summary = dir.0.join("summary.md");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args([
            "audit",
            "--fail-on",
            "never",
            "--format",
            "github",
            "--json",
            "r.json",
            "--junit",
            "j.xml",
            "--sarif",
            "s.sarif",
            "--html",
            "h.html",
            name,
        ])
        .current_dir(&dir.0)
        .env_remove("GITHUB_ACTIONS")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let read = |file: &str| std::fs::read_to_string(dir.0.join(file)).expect(file);

    let json: serde_json::Value = serde_json::from_str(&read("r.json")).expect("JSON");
    assert_eq!(json["files"][0]["path"], name);
    let sarif: serde_json::Value = serde_json::from_str(&read("s.sarif")).expect("SARIF");
    let uri = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
        ["artifactLocation"]["uri"]
        .as_str()
        .expect("uri");
    assert!(!uri.contains(['<', '"', ' ', '|']), "{uri}");

    let junit = read("j.xml");
    let doc = roxmltree::Document::parse(&junit).expect("well-formed JUnit");
    let case = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase"))
        .expect("a case");
    assert_eq!(case.attribute("file"), Some(name));

    let html = read("h.html");
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let page = roxmltree::Document::parse_with_options(&html, options).expect("well-formed HTML");
    assert!(
        page.descendants()
            .any(|n| n.has_tag_name("h3") && n.text() == Some(name)),
        "the checkpoint's heading is its name, as text"
    );
    assert!(!page.descendants().any(|n| n.has_tag_name("b")));

    // In the Markdown summary each of the name's Markdown characters is escaped.
    let summary = std::fs::read_to_string(&summary).expect("summary");
    assert!(summary.contains(r"a\<b\>\&'q"), "{summary}");
    assert!(summary.contains(r"\|\*\_\[x\]\(y\)\`\#\~\!"), "{summary}");
    assert_clean("summary", &summary);
}
