//! GitLab Code Quality (`artifacts:reports:codequality`): a JSON array of issues in the Code
//! Climate subset GitLab reads, shown in merge requests.
//!
//! Severity: info → `info`, warning → `minor`, error → `major`, except an error of a rule
//! whose security severity is Critical (TP501), which is `critical`: loading that checkpoint
//! runs code the pickle names, a security issue rather than a defect. Categories follow the
//! rules' tags (`security` → Security, `performance` → Performance). `blocker` is not used: GitLab's severities only sort and colour issues,
//! and the gate itself is the exit code. Suppressed findings are left out: GitLab has no
//! notion of a suppressed issue, and the baseline already decided they do not block.

use serde_json::{json, Value};
use tensorplay_audit::registry;
use tensorplay_audit::report::Report;
use tensorplay_audit::{Code, Finding, Severity};

pub fn render(report: &Report) -> anyhow::Result<String> {
    let issues: Vec<Value> = report
        .files
        .iter()
        .flat_map(|file| file.findings.iter().map(move |f| (file.path.as_str(), f)))
        .map(|(path, f)| {
            let mut description = f.message.clone();
            if !f.tensors.is_empty() {
                description.push_str(&format!(" (tensors: {})", f.tensors.join(", ")));
            }
            description.push_str(&format!(". Fix: {}", f.fix));
            json!({
                "type": "issue",
                "engine_name": "tensorplay",
                "check_name": format!("{} {}", f.code, f.code.name()),
                "description": description,
                "categories": [category(f)],
                "fingerprint": f.fingerprint,
                "severity": severity(f),
                "location": { "path": path, "lines": { "begin": 1 } },
            })
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&issues)?;
    text.push('\n');
    Ok(text)
}

fn severity(f: &Finding) -> &'static str {
    match f.severity {
        Severity::Error if critical(f.code) => "critical",
        Severity::Error => "major",
        Severity::Warning => "minor",
        Severity::Info => "info",
    }
}

/// A rule code scanning rates Critical (security severity over 9.0), as SARIF rates it.
fn critical(code: Code) -> bool {
    registry::by_code(code.as_str())
        .and_then(super::sarif::security_severity)
        .and_then(|score| score.parse::<f32>().ok())
        .is_some_and(|score| score > 9.0)
}

/// A Code Climate category from the rule's tags: Security, Performance, else Bug Risk.
fn category(f: &Finding) -> &'static str {
    let tags = registry::by_code(f.code.as_str()).map_or(&[][..], |rule| rule.tags());
    if tags.contains(&"security") {
        "Security"
    } else if tags.contains(&"performance") {
        "Performance"
    } else {
        "Bug Risk"
    }
}
