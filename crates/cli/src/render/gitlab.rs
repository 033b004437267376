//! GitLab Code Quality (`artifacts:reports:codequality`): a JSON array of issues in the Code
//! Climate subset GitLab reads, shown in merge requests.
//!
//! Severity: info → `info`, warning → `minor`, error → `major`, except TP501 at error, which
//! is `critical`: loading that checkpoint runs code the pickle names, a security issue rather
//! than a defect. `blocker` is not used: GitLab's severities only sort and colour issues,
//! and the gate itself is the exit code. Suppressed findings are left out: GitLab has no
//! notion of a suppressed issue, and the baseline already decided they do not block.

use super::fingerprint::Unique;
use serde_json::{json, Value};
use tensorplay_audit::report::Report;
use tensorplay_audit::rules::safety::UnsafeGlobalRule;
use tensorplay_audit::{Finding, Severity};

pub fn render(report: &Report) -> anyhow::Result<String> {
    let mut unique = Unique::default();
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
                "fingerprint": unique.next(path, f),
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
        Severity::Error if f.code == UnsafeGlobalRule::CODE => "critical",
        Severity::Error => "major",
        Severity::Warning => "minor",
        Severity::Info => "info",
    }
}

/// A Code Climate category: unsafe globals are Security, memory rules (TP3xx) Performance.
fn category(f: &Finding) -> &'static str {
    if f.code == UnsafeGlobalRule::CODE {
        "Security"
    } else if f.code.as_str().starts_with("TP3") {
        "Performance"
    } else {
        "Bug Risk"
    }
}
