//! SARIF 2.1.0 for GitHub code scanning and other SARIF viewers: one run, every rule in
//! `tool.driver.rules`, one result per finding (suppressed ones marked so), each located at
//! its checkpoint file with the tensors as logical locations.

use serde_json::{json, Map, Value};
use tensorplay_audit::registry::RULES;
use tensorplay_audit::report::Report;
use tensorplay_audit::rule::Rule;
use tensorplay_audit::{Finding, Severity};

const SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// The key SARIF files a finding's fingerprint under; the version changes if the identity
/// ever does.
const FINGERPRINT_KEY: &str = "tensorplay/v1";

/// Tensors a result names: GitHub shows 100 locations of a result.
const MAX_TENSORS: usize = 100;

/// Relative paths are relative to the checkout; viewers resolve this base there.
const SRCROOT: &str = "%SRCROOT%";

pub fn render(report: &Report) -> anyhow::Result<String> {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|rule| {
            let mut properties = json!({ "tags": rule.tags() });
            if let Some(score) = security_severity(*rule) {
                properties["security-severity"] = json!(score);
            }
            json!({
                "id": rule.code().as_str(),
                "name": rule.name(),
                "shortDescription": { "text": rule.summary() },
                "fullDescription": { "text": rule.doc() },
                "help": { "text": rule.doc() },
                "defaultConfiguration": { "level": level(rule.default_severity()) },
                "properties": properties,
            })
        })
        .collect();
    let mut driver = Map::new();
    driver.insert("name".into(), json!(report.tool.name));
    driver.insert("version".into(), json!(report.tool.version));
    let homepage = env!("CARGO_PKG_HOMEPAGE");
    if !homepage.is_empty() {
        driver.insert("informationUri".into(), json!(homepage));
    }
    driver.insert("rules".into(), Value::Array(rules));

    let mut results = Vec::new();
    for file in &report.files {
        for finding in &file.findings {
            results.push(result(&file.path, finding, false));
        }
        for finding in &file.suppressed {
            results.push(result(&file.path, finding, true));
        }
    }
    let log = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": driver },
            "results": results,
        }],
    });
    let mut text = serde_json::to_string_pretty(&log)?;
    text.push('\n');
    Ok(text)
}

fn result(path: &str, finding: &Finding, suppressed: bool) -> Value {
    let mut location = json!({
        "physicalLocation": {
            "artifactLocation": artifact_location(path),
            // Viewers place results on lines; a checkpoint has none, so line 1 stands for
            // the file.
            "region": { "startLine": 1 },
        },
    });
    // GitHub keeps 100 locations of a result and rejects a file past 1 000; the JSON report
    // lists every tensor.
    let mut tensors: Vec<&String> = Vec::new();
    for t in &finding.tensors {
        if tensors.len() == MAX_TENSORS {
            break;
        }
        if !tensors.contains(&t) {
            tensors.push(t);
        }
    }
    if !tensors.is_empty() {
        location["logicalLocations"] = tensors
            .iter()
            .map(|t| json!({ "name": t, "kind": "member" }))
            .collect();
    }
    let mut properties = json!({
        "tensors": tensors,
        "tensor_count": finding.tensors.len(),
    });
    if let Some(storage) = finding.storage {
        properties["storage"] = json!(storage);
    }
    // A chat template's place in its file (a GGUF key, a JSON path) and its hash.
    if let Some(template) = &finding.template {
        properties["template"] = json!(template);
    }
    let mut result = json!({
        "ruleId": finding.code.as_str(),
        "ruleIndex": RULES.iter().position(|r| r.code() == finding.code),
        "level": level(finding.severity),
        "message": { "text": format!("{}\nFix: {}", finding.message, finding.fix) },
        "locations": [location],
        "partialFingerprints": {
            (FINGERPRINT_KEY): finding.fingerprint,
        },
        "properties": properties,
    });
    if suppressed {
        result["suppressions"] = json!([{
            "kind": "external",
            "justification": "recorded in the tensorplay baseline",
        }]);
    }
    result
}

/// The score GitHub code scanning rates a `security` rule by, from the rule's severity, so
/// the alert says what the report says: an error Critical (over 9.0), a warning Medium (4.0
/// to 6.9), an info Low. GitHub fails a pull request's check on High or higher by default,
/// as `--fail-on error` fails the run on errors only. `None` for other rules: GitHub shows
/// them as problems, not security alerts.
pub fn security_severity(rule: &dyn Rule) -> Option<&'static str> {
    if !rule.tags().contains(&"security") {
        return None;
    }
    Some(match rule.default_severity() {
        Severity::Error => "9.5",
        Severity::Warning => "5.5",
        Severity::Info => "2.0",
    })
}

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// A path as a URI reference: relative ones against `%SRCROOT%`, absolute ones as `file:`.
fn artifact_location(path: &str) -> Value {
    let path = path.replace('\\', "/");
    let bytes = path.as_bytes();
    let drive = bytes.first().is_some_and(u8::is_ascii_alphabetic)
        && bytes.get(1) == Some(&b':')
        && bytes.get(2) == Some(&b'/');
    if path.starts_with('/') {
        json!({ "uri": format!("file://{}", encode(&path, false)) })
    } else if drive {
        json!({ "uri": format!("file:///{}", encode(&path, true)) })
    } else {
        json!({ "uri": encode(&path, false), "uriBaseId": SRCROOT })
    }
}

/// Percent-encodes all but unreserved characters and `/` (and a drive letter's `:`).
fn encode(path: &str, drive: bool) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, b) in path.bytes().enumerate() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/')
            || (drive && i == 1);
        if keep {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{artifact_location, level, security_severity};
    use serde_json::json;
    use tensorplay_audit::registry::RULES;
    use tensorplay_audit::Severity;

    /// GitHub's bands: over 9.0 Critical, 7.0 to 8.9 High, 4.0 to 6.9 Medium, below Low.
    fn band(score: &str) -> &'static str {
        match score.parse::<f64>().expect("a number") {
            s if s > 9.0 => "critical",
            s if s >= 7.0 => "high",
            s if s >= 4.0 => "medium",
            _ => "low",
        }
    }

    /// Every rule: code scanning's level and rating say what the rule's one severity says.
    #[test]
    fn code_scanning_rates_every_rule_by_its_severity() {
        for rule in RULES {
            let severity = rule.default_severity();
            let expected_level = match severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Info => "note",
            };
            assert_eq!(level(severity), expected_level, "{}", rule.code());
            let score = security_severity(*rule);
            assert_eq!(
                score.is_some(),
                rule.tags().contains(&"security"),
                "{}",
                rule.code()
            );
            if let Some(score) = score {
                let expected = match severity {
                    Severity::Error => "critical",
                    Severity::Warning => "medium",
                    Severity::Info => "low",
                };
                assert_eq!(band(score), expected, "{} {severity}", rule.code());
            }
        }
    }

    #[test]
    fn paths_become_uri_references() {
        assert_eq!(
            artifact_location("models/a b#1.pt"),
            json!({ "uri": "models/a%20b%231.pt", "uriBaseId": "%SRCROOT%" })
        );
        assert_eq!(
            artifact_location("/ckpt/m.pt"),
            json!({ "uri": "file:///ckpt/m.pt" })
        );
        assert_eq!(
            artifact_location("C:\\ckpt\\m.pt"),
            json!({ "uri": "file:///C:/ckpt/m.pt" })
        );
        assert_eq!(
            artifact_location("x:y.pt"),
            json!({ "uri": "x%3Ay.pt", "uriBaseId": "%SRCROOT%" })
        );
    }
}
