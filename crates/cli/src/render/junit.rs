//! JUnit XML for Jenkins and GitLab: one test suite per checkpoint, one test case per rule
//! that ran on it, failing with every finding of that rule, so CI trends show each rule per
//! checkpoint.

use junit_report::{Duration, ReportBuilder, TestCase, TestSuiteBuilder};
use tensorplay_audit::report::Report;

pub fn render(report: &Report) -> anyhow::Result<String> {
    let mut builder = ReportBuilder::new();
    for file in &report.files {
        let mut suite = TestSuiteBuilder::new(&file.path);
        for code in &file.checked {
            let findings: Vec<_> = file.findings.iter().filter(|f| f.code == *code).collect();
            let name = format!("{code} {}", code.name());
            let failing: Vec<_> = findings
                .iter()
                .filter(|f| report.fails(f.severity))
                .collect();
            let mut case = if failing.is_empty() {
                TestCase::success(&name, Duration::ZERO)
            } else {
                let details: Vec<String> = failing
                    .iter()
                    .map(|f| format!("{}[{}] {}\n  fix: {}", f.severity, f.code, f.message, f.fix))
                    .collect();
                let mut case = TestCase::failure(
                    &name,
                    Duration::ZERO,
                    code.as_str(),
                    &first_line(&failing[0].message, failing.len()),
                );
                case.set_system_out(&details.join("\n"));
                case
            };
            case.set_classname(&file.path);
            // Findings below the fail-on level stay visible without failing the case.
            let quiet: Vec<String> = findings
                .iter()
                .filter(|f| !report.fails(f.severity))
                .map(|f| format!("{}[{}] {}", f.severity, f.code, f.message))
                .collect();
            if !quiet.is_empty() && failing.is_empty() {
                case.set_system_out(&quiet.join("\n"));
            }
            suite.add_testcase(case);
        }
        // Known findings stay visible as skipped cases: suppressed, not gone.
        for f in &file.suppressed {
            let mut case = TestCase::skipped(&format!(
                "{} {} (suppressed by the baseline)",
                f.code,
                f.code.name()
            ));
            case.set_classname(&file.path);
            case.set_system_out(&format!("{}[{}] {}", f.severity, f.code, f.message));
            suite.add_testcase(case);
        }
        builder.add_testsuite(suite.build());
    }
    let mut out = Vec::new();
    builder.build().write_xml(&mut out)?;
    let mut text = String::from_utf8(out)?;
    text.push('\n');
    Ok(text)
}

fn first_line(message: &str, count: usize) -> String {
    if count == 1 {
        message.to_owned()
    } else {
        format!("{message} (and {} more)", count - 1)
    }
}
