//! docs/rules.md carries the rules table as `tensorplay rules --format markdown` prints it, so
//! the documented codes, names, severities and summaries cannot drift from the registry.

use crate::common::{root, stdout, tensorplay};

const BEGIN: &str = "<!-- rules:begin -->\n";
const END: &str = "<!-- rules:end -->";

#[test]
fn the_rules_table_in_the_docs_is_the_registry_s() {
    let out = tensorplay(&["rules", "--format", "markdown"]);
    assert_eq!(out.status.code(), Some(0));
    let generated = stdout(&out);

    let doc = std::fs::read_to_string(root().join("docs/rules.md")).expect("docs/rules.md");
    // A checkout with CRLF line endings holds the same table.
    let doc = doc.replace("\r\n", "\n");
    let start = doc
        .find(BEGIN)
        .expect("docs/rules.md has <!-- rules:begin -->")
        + BEGIN.len();
    let len = doc[start..]
        .find(END)
        .expect("docs/rules.md has <!-- rules:end --> after <!-- rules:begin -->");
    assert_eq!(
        &doc[start..start + len],
        generated,
        "docs/rules.md's table differs from `tensorplay rules --format markdown`: \
         replace the lines between the markers with that command's output"
    );
}

#[test]
fn the_markdown_table_has_the_text_table_s_rules_in_its_order() {
    let markdown = stdout(&tensorplay(&["rules", "--format", "markdown"]));
    let text = stdout(&tensorplay(&["rules"]));
    let lines: Vec<&str> = markdown.lines().collect();
    assert_eq!(lines[0], "| code | name | severity | summary |");
    assert_eq!(lines[1], "|---|---|---|---|");
    let codes: Vec<&str> = lines[2..]
        .iter()
        .map(|l| l.trim_start_matches("| ").split(" | ").next().unwrap())
        .collect();
    let text_codes: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(codes, text_codes);
    // README.md counts the rules in words: update it with the registry.
    assert_eq!(codes.len(), 39, "README.md says thirty-nine rules");
    // Four cells a row: no summary's `|` ends its cell early.
    for line in &lines[2..] {
        assert_eq!(line.replace("\\|", "").matches('|').count(), 5, "{line}");
    }
}

#[test]
fn the_json_list_has_every_rule_with_its_doc() {
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&tensorplay(&["rules", "--format", "json"]))).expect("JSON");
    let text = stdout(&tensorplay(&["rules"]));
    let rules = json["rules"].as_array().expect("rules");
    let codes: Vec<&str> = rules.iter().map(|r| r["code"].as_str().unwrap()).collect();
    let text_codes: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(codes, text_codes);
    for rule in rules {
        assert!(
            rule["doc"].as_str().unwrap().contains("How to fix"),
            "{rule}"
        );
        // An unreadable, inconsistent or unjudged input always fails: those rules are not
        // configurable.
        let fixed = matches!(rule["code"].as_str(), Some("TP502" | "TP503" | "TP506"));
        assert_eq!(rule["configurable"], !fixed, "{rule}");
        // The rules that guard against a file running code are rated for code scanning, and
        // so are those judging a chat template (code a server runs on every request), a Keras
        // config (what load_model builds and runs) and those failing a model whose provenance
        // does not verify.
        let security = matches!(
            rule["code"].as_str(),
            Some(
                "TP501"
                    | "TP502"
                    | "TP504"
                    | "TP701"
                    | "TP702"
                    | "TP703"
                    | "TP704"
                    | "TP711"
                    | "TP712"
                    | "TP713"
                    | "TP714"
                    | "TP716"
                    | "TP801"
                    | "TP802"
                    | "TP803"
                    | "TP804"
            )
        );
        let tags = rule["tags"].as_array().expect("tags");
        assert_eq!(tags.contains(&"security".into()), security, "{rule}");
        assert_eq!(rule["security_severity"].is_string(), security, "{rule}");
    }
}
