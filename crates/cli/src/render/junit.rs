//! JUnit XML for Jenkins and GitLab: one test suite per checkpoint, one test case per rule
//! that ran on it, so CI trends show each rule per checkpoint.
//!
//! Written by hand to meet both the Jenkins xUnit `junit-10.xsd` and the Ant `JUnit.xsd`
//! (see `tests/data/`): suites carry `properties`, cases, `system-out`, `system-err` in that
//! order; a case holds at most one of `failure` / `skipped`, whose body is the full text
//! (message, tensors, fix) because CI servers show a failure's body, not its attributes.
//! Two attributes go beyond both XSDs, as pytest and GitLab write them and every JUnit reader
//! ignores what it does not know: `file` on a case (GitLab links it) and totals on
//! `<testsuites>`.
//!
//! A case's status is the rule's verdict: failed when a finding reaches `--fail-on`;
//! skipped, with the findings as its body, when it found only lower ones: GitLab shows the
//! body of failed and skipped cases and drops everything a passing case carries, so this
//! keeps warnings in sight without failing the build and keeps one case per rule for trends.
//! Such a case also carries the findings in its own `system-out` (a Jenkins xUnit extension
//! the Ant XSD lacks; Jenkins shows it, and a skipped case's message, not the body), and its
//! message is the first finding's line. Suppressed findings and files that were not audited
//! are skipped cases too.

use super::{fail_on_name, timestamp, xml};
use std::fmt::Write;
use tensorplay_audit::report::{FileReport, Report};
use tensorplay_audit::{Code, Finding};

pub fn render(report: &Report) -> anyhow::Result<String> {
    render_with_files(report, &[])
}

/// [`render`], with the `file` attribute of file `i`'s cases `files[i]` where that is given
/// (the report's path otherwise): a live audit in a test is labelled with the test's id, and
/// GitLab links `file`, so the pytest plugin gives the test's file.
pub fn render_with_files(report: &Report, files: &[Option<String>]) -> anyhow::Result<String> {
    let stamp = timestamp::now_utc();
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    let mut suites: Vec<Suite> = report
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let source = files.get(i).and_then(Option::as_deref).unwrap_or(&f.path);
            file_suite(report, f, source)
        })
        .collect();
    if !report.skipped.is_empty() {
        suites.push(skipped_suite(report));
    }
    let total = |count: fn(&Suite) -> usize| suites.iter().map(count).sum::<usize>();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    writeln!(
        out,
        "<testsuites name=\"tensorplay\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"0\">",
        total(|s| s.cases.len()),
        total(Suite::failures),
        total(Suite::skipped),
    )?;
    for (id, suite) in suites.iter().enumerate() {
        suite.write(&mut out, id, &stamp, &host)?;
    }
    out.push_str("</testsuites>\n");
    Ok(out)
}

/// `tensorplay.` and the path with every dot made `_`: Jenkins splits a class name at its
/// last dot into package and class, so this way the split always lands after `tensorplay`
/// and the class is the checkpoint's path (`tensorplay.models/llama_pt`), not `pt`.
pub fn classname(path: &str) -> String {
    format!("tensorplay.{}", path.replace('\\', "/").replace('.', "_"))
}

struct Suite {
    name: String,
    properties: Vec<(&'static str, String)>,
    cases: Vec<Case>,
}

struct Case {
    name: String,
    classname: String,
    file: String,
    outcome: Outcome,
}

enum Outcome {
    Passed,
    Failed {
        kind: Code,
        message: String,
        body: String,
    },
    Skipped {
        message: String,
        body: String,
    },
    /// Findings below `--fail-on`: skipped, and the findings in the case's `system-out` too,
    /// which Jenkins shows where it shows a skipped case's message only.
    Below {
        message: String,
        body: String,
    },
}

impl Suite {
    fn failures(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed { .. }))
            .count()
    }

    fn skipped(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Skipped { .. } | Outcome::Below { .. }))
            .count()
    }

    fn write(&self, out: &mut String, id: usize, stamp: &str, host: &str) -> std::fmt::Result {
        writeln!(
            out,
            "  <testsuite id=\"{id}\" name=\"{}\" package=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" hostname=\"{}\" timestamp=\"{stamp}\" time=\"0\">",
            xml::attr(&self.name),
            xml::attr(&classname(&self.name)),
            self.cases.len(),
            self.failures(),
            self.skipped(),
            xml::attr(host),
        )?;
        out.push_str("    <properties>\n");
        for (name, value) in &self.properties {
            writeln!(
                out,
                "      <property name=\"{name}\" value=\"{}\"/>",
                xml::attr(value)
            )?;
        }
        out.push_str("    </properties>\n");
        for case in &self.cases {
            case.write(out)?;
        }
        out.push_str("    <system-out/>\n    <system-err/>\n  </testsuite>\n");
        Ok(())
    }
}

impl Case {
    fn write(&self, out: &mut String) -> std::fmt::Result {
        write!(
            out,
            "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" time=\"0\"",
            xml::attr(&self.name),
            xml::attr(&self.classname),
            xml::attr(&self.file),
        )?;
        match &self.outcome {
            Outcome::Passed => out.push_str("/>\n"),
            Outcome::Failed {
                kind,
                message,
                body,
            } => writeln!(
                out,
                ">\n      <failure type=\"{kind}\" message=\"{}\">{}</failure>\n    </testcase>",
                xml::attr(message),
                xml::text(body)
            )?,
            Outcome::Skipped { message, body } => writeln!(
                out,
                ">\n      <skipped message=\"{}\">{}</skipped>\n    </testcase>",
                xml::attr(message),
                xml::text(body)
            )?,
            Outcome::Below { message, body } => writeln!(
                out,
                ">\n      <skipped message=\"{}\">{}</skipped>\n      <system-out>{}</system-out>\n    </testcase>",
                xml::attr(message),
                xml::text(body),
                xml::text(body)
            )?,
        }
        Ok(())
    }
}

fn file_suite(report: &Report, file: &FileReport, source: &str) -> Suite {
    let case = |name: String, outcome: Outcome| Case {
        name,
        classname: classname(&file.path),
        file: source.to_owned(),
        outcome,
    };
    let mut cases: Vec<Case> = file
        .checked
        .iter()
        .map(|code| {
            let findings: Vec<&Finding> =
                file.findings.iter().filter(|f| f.code == *code).collect();
            case(
                format!("{code} {}", code.name()),
                rule_outcome(report, *code, &findings),
            )
        })
        .collect();
    // Known findings stay visible: suppressed, not gone.
    cases.extend(file.suppressed.iter().map(|f| {
        case(
            format!("{} {} (suppressed by the baseline)", f.code, f.code.name()),
            Outcome::Skipped {
                message: format!("suppressed by the baseline: {}", f.message),
                body: describe(f),
            },
        )
    }));
    let properties = vec![
        (
            "format",
            file.format
                .clone()
                .unwrap_or_else(|| "unreadable".to_owned()),
        ),
        ("tensors", file.tensors.to_string()),
        ("storages", file.storages.to_string()),
        ("bytes", file.bytes.to_string()),
    ];
    Suite {
        name: file.path.clone(),
        properties,
        cases,
    }
}

fn rule_outcome(report: &Report, code: Code, findings: &[&Finding]) -> Outcome {
    let body = findings
        .iter()
        .map(|f| describe(f))
        .collect::<Vec<_>>()
        .join("\n");
    let failing: Vec<&&Finding> = findings
        .iter()
        .filter(|f| report.fails(f.severity))
        .collect();
    match (failing.first(), findings.len()) {
        (_, 0) => Outcome::Passed,
        (Some(first), n) => Outcome::Failed {
            kind: code,
            message: if n == 1 {
                first.message.clone()
            } else {
                format!("{} (and {} more)", first.message, n - 1)
            },
            body,
        },
        (None, n) => Outcome::Below {
            message: format!(
                "{}{} (not failing: below --fail-on {})",
                headline(findings.first().copied()),
                if n == 1 {
                    String::new()
                } else {
                    format!(" (and {} more)", n - 1)
                },
                fail_on_name(report.summary.fail_on)
            ),
            body,
        },
    }
}

fn skipped_suite(report: &Report) -> Suite {
    let cases = report
        .skipped
        .iter()
        .map(|s| Case {
            name: s.path.clone(),
            classname: classname(&s.path),
            file: s.path.clone(),
            outcome: Outcome::Skipped {
                message: s.reason.clone(),
                body: format!("not audited: {}", s.reason),
            },
        })
        .collect();
    Suite {
        name: "skipped files".to_owned(),
        properties: Vec::new(),
        cases,
    }
}

/// `warning[TP105] non-contiguous: message`.
fn headline(f: Option<&Finding>) -> String {
    f.map(|f| {
        format!(
            "{}[{}] {}: {}",
            f.severity,
            f.code,
            f.code.name(),
            f.message
        )
    })
    .unwrap_or_default()
}

/// A finding as a failure's body: what, which tensors, the fix.
fn describe(f: &Finding) -> String {
    let mut text = headline(Some(f));
    if !f.tensors.is_empty() {
        text.push_str("\n  tensors: ");
        text.push_str(&f.tensors.join(", "));
    }
    text.push_str("\n  fix: ");
    text.push_str(&f.fix);
    text
}

#[cfg(test)]
mod tests {
    use super::{classname, render, render_with_files};
    use tensorplay_audit::report::{FailOn, FileReport, Report};

    fn live(label: &str) -> FileReport {
        FileReport {
            remote: None,
            path: label.into(),
            format: Some("live".into()),
            tensors: 0,
            storages: 0,
            bytes: 0,
            devices: Vec::new(),
            dtypes: Vec::new(),
            checked: vec![tensorplay_audit::registry::RULES[0].code()],
            findings: Vec::new(),
            suppressed: Vec::new(),
            allowed_globals: Vec::new(),
            memory: None,
            device: None,
            inventory: None,
            layout: None,
        }
    }

    #[test]
    fn a_case_links_the_file_it_is_given_and_keeps_its_label_as_class() {
        let report = Report::new(
            vec![live("tests/test_m.py::test_x"), live("model.pt")],
            Vec::new(),
            FailOn::Error,
        );
        let given = [Some("tests/test_m.py".to_owned())];
        let xml = render_with_files(&report, &given).unwrap();
        assert!(
            xml.contains(
                "classname=\"tensorplay.tests/test_m_py::test_x\" file=\"tests/test_m.py\""
            ),
            "{xml}"
        );
        // A file given nothing keeps its path, as `render` writes every file.
        assert!(
            xml.contains("classname=\"tensorplay.model_pt\" file=\"model.pt\""),
            "{xml}"
        );
        let plain = render(&report).unwrap();
        assert!(
            plain.contains("file=\"tests/test_m.py::test_x\""),
            "{plain}"
        );
    }

    #[test]
    fn the_last_dot_of_a_classname_follows_tensorplay() {
        assert_eq!(
            classname("models.v2/llama.q4.pt"),
            "tensorplay.models_v2/llama_q4_pt"
        );
        assert_eq!(classname("a\\b.bin"), "tensorplay.a/b_bin");
    }
}
