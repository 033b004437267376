//! GitHub Actions: one workflow command per finding (`::error file=…,title=…::…`), which the
//! runner turns into an annotation on the file, and a Markdown summary for the job page.

use super::fail_on_name;
use super::markdown::cell;
use std::fmt::Write;
use tensorplay_audit::report::Report;
use tensorplay_audit::text::{human_bytes, printable};
use tensorplay_audit::{Finding, Severity};

/// Beyond this many findings, the summary table counts the rest (a step summary holds 1 MiB).
const MAX_SUMMARY_ROWS: usize = 200;
/// Annotations of one level a step shows (GitHub drops the rest silently): the rest are
/// counted in one notice that points at the job summary.
const MAX_ANNOTATIONS: usize = 10;
/// Tensor names an annotation or a summary row lists before counting the rest.
const MAX_NAMES: usize = 10;

/// The annotation commands, one line each, at most [`MAX_ANNOTATIONS`] a level, then a notice
/// counting the rest. Suppressed findings get none: the baseline knows them.
pub fn annotations(report: &Report) -> String {
    let mut out = String::new();
    let mut shown = [0usize; 3];
    let mut left = [0usize; 3];
    for file in &report.files {
        for f in &file.findings {
            let (command, level) = match f.severity {
                Severity::Error => ("error", 0),
                Severity::Warning => ("warning", 1),
                Severity::Info => ("notice", 2),
            };
            if shown[level] == MAX_ANNOTATIONS {
                left[level] += 1;
                continue;
            }
            shown[level] += 1;
            let mut text = f.message.clone();
            if !f.tensors.is_empty() {
                text.push_str("\ntensors: ");
                text.push_str(&names(&f.tensors));
            }
            text.push_str("\nfix: ");
            text.push_str(&f.fix);
            out.push_str(&format!(
                "::{command} file={},title={}::{}\n",
                property(&file.path),
                property(&format!("{} {}", f.code, f.code.name())),
                data(&text)
            ));
        }
    }
    let [errors, warnings, notices] = left;
    if errors + warnings + notices > 0 {
        out.push_str(&format!(
            "::notice title=tensorplay::{errors} more errors, {warnings} more warnings and {notices} more notices than a step shows are in the job summary and the reports\n"
        ));
    }
    out
}

/// The first [`MAX_NAMES`] names, then how many more.
fn names(tensors: &[String]) -> String {
    let shown = tensors.get(..MAX_NAMES).unwrap_or(tensors);
    let mut text = shown.join(", ");
    if tensors.len() > shown.len() {
        text.push_str(&format!(" and {} more", tensors.len() - shown.len()));
    }
    text
}

/// The job summary: the verdict, the counts, a row per finding.
pub fn summary(report: &Report) -> String {
    let sum = &report.summary;
    let mut out = String::new();
    let verdict = if sum.passed { "passed" } else { "FAILED" };
    let _ = writeln!(
        out,
        "### tensorplay audit: {verdict} (fail-on {})\n",
        fail_on_name(sum.fail_on)
    );
    out.push_str(
        "| files | tensors | storages | size | errors | warnings | infos | suppressed | skipped |\n",
    );
    out.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        sum.files,
        sum.tensors,
        sum.storages,
        // Read by people on the job page: binary units, as the human report (JSON keeps bytes).
        human_bytes(sum.bytes),
        sum.errors,
        sum.warnings,
        sum.infos,
        sum.suppressed,
        report.skipped.len()
    );
    let rows: Vec<(&str, &Finding, bool)> = report
        .files
        .iter()
        .flat_map(|file| {
            let found = file.findings.iter().map(|f| (file.path.as_str(), f, false));
            let known = file
                .suppressed
                .iter()
                .map(|f| (file.path.as_str(), f, true));
            found.chain(known)
        })
        .collect();
    if rows.is_empty() {
        return out;
    }
    out.push_str("| severity | rule | file | tensors | message | fix |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for (path, f, suppressed) in rows.iter().take(MAX_SUMMARY_ROWS) {
        let severity = if *suppressed {
            format!("{} (suppressed)", f.severity)
        } else {
            f.severity.to_string()
        };
        let _ = writeln!(
            out,
            "| {severity} | {} {} | {} | {} | {} | {} |",
            f.code,
            f.code.name(),
            cell(path),
            cell(&names(&f.tensors)),
            cell(&f.message),
            cell(&f.fix)
        );
    }
    if rows.len() > MAX_SUMMARY_ROWS {
        let _ = writeln!(
            out,
            "\n{} more findings are in the reports.",
            rows.len() - MAX_SUMMARY_ROWS
        );
    }
    out
}

/// Appends [`summary`] to `$GITHUB_STEP_SUMMARY` when the runner set it. A summary that
/// cannot be written is a warning: it must not turn a verdict into "could not judge".
pub fn append_step_summary(report: &Report) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(summary(report).as_bytes()));
    if let Err(e) = written {
        eprintln!(
            "warning: cannot append to GITHUB_STEP_SUMMARY ({}): {e}",
            std::path::Path::new(&path).display()
        );
    }
}

/// A workflow command's message: control, bidi and noncharacter code points written out
/// visibly (the annotation shows them), then `%` and line breaks as the runner decodes them.
pub(crate) fn data(text: &str) -> String {
    printable(text, true)
        .replace('%', "%25")
        .replace('\n', "%0A")
}

/// A workflow command's property value: as [`data`], and `:` and `,` too.
pub(crate) fn property(text: &str) -> String {
    printable(text, false)
        .replace('%', "%25")
        .replace(':', "%3A")
        .replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_gives_sizes_in_binary_units() {
        let mut report = Report::new(Vec::new(), Vec::new(), Default::default());
        report.summary.bytes = 13_002_342;
        let text = summary(&report);
        assert!(
            text.contains("| storages | size |") && text.contains("| 12.4 MiB |"),
            "{text}"
        );
        assert!(!text.contains("13002342"), "{text}");
    }

    #[test]
    fn workflow_command_escapes() {
        assert_eq!(
            data("50% done\r\nnext: a,b"),
            "50%25 done\\u{d}%0Anext: a,b"
        );
        assert_eq!(property("dir,x/a:b%.pt\n"), "dir%2Cx/a%3Ab%25.pt\\u{a}");
        assert_eq!(data("\u{1b}[31m\u{202e}"), "\\u{1b}[31m\\u{202e}");
    }

    proptest::proptest! {
        /// Whatever a file names, a command stays one line the runner reads as data: no line
        /// break, no control, bidi or noncharacter code point, and a property no `:` or `,`.
        #[test]
        fn a_command_carries_any_text_as_data(text in proptest::prelude::any::<String>()) {
            for escaped in [data(&text), property(&text)] {
                proptest::prop_assert!(!escaped.chars().any(tensorplay_audit::text::hidden));
            }
            let value = property(&text);
            proptest::prop_assert!(!value.contains(':') && !value.contains(','));
        }
    }
}
