//! Output for people: per file, findings grouped by rule with the tensors and the fix, then
//! a summary line. Sizes in binary units (the JSON report keeps exact bytes). Colour only
//! when `crate::color` says so.

use anstyle::{AnsiColor, Style as Paint};
use std::fmt::Write;
use tensorplay_audit::report::Report;
use tensorplay_audit::text::{human_bytes, plural, printable};
use tensorplay_audit::{Code, Finding, Severity};

/// Beyond this many, skipped files are counted rather than listed.
const MAX_SKIPPED_LISTED: usize = 10;

/// Beyond this many, a finding's tensors are cut to the first few and counted (`--verbose`
/// lists them all; the JSON report always does), so a finding over a million tensors stays
/// one readable line.
const MAX_TENSORS_LISTED: usize = 10;

/// How to paint, and how much to list.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
    /// Every tensor of every finding, however many.
    pub verbose: bool,
}

impl Style {
    fn paint(self, paint: Paint, text: &str) -> String {
        if self.color {
            format!("{paint}{text}{paint:#}")
        } else {
            text.to_owned()
        }
    }

    fn severity(self, s: Severity) -> String {
        let color = match s {
            Severity::Error => AnsiColor::Red,
            Severity::Warning => AnsiColor::Yellow,
            Severity::Info => AnsiColor::Cyan,
        };
        self.paint(bold(Some(color)), s.name())
    }
}

fn bold(color: Option<AnsiColor>) -> Paint {
    Paint::new().bold().fg_color(color.map(Into::into))
}

/// The names joined, cut to [`MAX_TENSORS_LISTED`] unless `all`.
/// Text from a file (paths, tensor names, messages that quote them) as the log may show it:
/// a crafted name cannot rewrite the line that reports it.
fn shown(text: &str) -> String {
    printable(text, false)
}

fn tensor_list(names: &[String], all: bool) -> String {
    if all || names.len() <= MAX_TENSORS_LISTED {
        return names.join(", ");
    }
    let shown = names.get(..MAX_TENSORS_LISTED).unwrap_or(names);
    format!(
        "{} … and {} more (--verbose lists all)",
        shown.join(", "),
        names.len() - shown.len()
    )
}

pub fn render(report: &Report, style: Style) -> anyhow::Result<String> {
    let mut out = String::new();
    for file in &report.files {
        let what = match &file.format {
            Some(format) => format!(
                "{format}, {}, {}, {}",
                plural(file.tensors, "tensor"),
                plural(file.storages, "storage"),
                human_bytes(file.bytes)
            ),
            None => "unreadable".to_owned(),
        };
        writeln!(
            out,
            "{} ({what})",
            style.paint(bold(None), &shown(&file.path))
        )?;
        if file.remote.is_some_and(|r| !r.values_read) {
            // A remote signature check that did not hash every byte compared the LFS files by
            // the Hub's listed SHA-256.
            let note = if file.format.as_deref() == Some("oms-signature") {
                "LFS files compared by the Hub's lfs.oid, not fetched: this trusts the Hub's \
                 content addressing; --deep hashes every byte"
            } else {
                "tensor values not read: a remote audit reads metadata only; --deep reads them"
            };
            writeln!(out, "  {note}")?;
        }
        if let (Some(device), Some(memory)) = (&file.device, &file.memory) {
            let verdict = if device.reserved_bytes == memory.reserved_bytes {
                "matches the simulation"
            } else {
                "differs from the simulation"
            };
            writeln!(
                out,
                "  GPU load on {}: {} checked, {} failed; reserved {} in {} (simulated {}): {verdict}{}",
                shown(&device.device),
                plural(device.storages_checked, "storage"),
                device.storages_failed,
                human_bytes(device.reserved_bytes),
                plural(device.segments, "segment"),
                human_bytes(memory.reserved_bytes),
                if device.pinned_staging { "" } else { "; pinned memory unavailable, staged through pageable memory" }
            )?;
        }
        if file.findings.is_empty() {
            writeln!(
                out,
                "  no findings ({} checked)",
                plural(file.checked.len(), "rule")
            )?;
        }
        for code in &file.checked {
            let of_rule: Vec<&Finding> = file.findings.iter().filter(|f| f.code == *code).collect();
            for entry in entries(&of_rule) {
                entry.write(&mut out, style)?;
            }
        }
        if !file.allowed_globals.is_empty() {
            writeln!(
                out,
                "  allowed by [pickle] allow_globals (never executed): {}",
                shown(&file.allowed_globals.join(", "))
            )?;
        }
        for f in &file.suppressed {
            writeln!(
                out,
                "  suppressed by the baseline: {}[{}] {}: {}",
                f.severity,
                f.code,
                f.code.name(),
                shown(&f.message)
            )?;
        }
        out.push('\n');
    }
    if report.skipped.len() <= MAX_SKIPPED_LISTED {
        for s in &report.skipped {
            writeln!(out, "skipped {}: {}", shown(&s.path), shown(&s.reason))?;
        }
    } else {
        writeln!(
            out,
            "skipped {} that are not checkpoints or are shards of an audited index (the JSON report lists them)",
            plural(report.skipped.len(), "file")
        )?;
    }
    if !report.skipped.is_empty() {
        out.push('\n');
    }
    let sum = &report.summary;
    let verdict = if sum.passed {
        style.paint(bold(Some(AnsiColor::Green)), "passed")
    } else {
        style.paint(bold(Some(AnsiColor::Red)), "FAILED")
    };
    let level = format!("fail-on {}", super::fail_on_name(sum.fail_on));
    writeln!(
        out,
        "{}, {}, {}, {}: {}, {}, {}, {}{} skipped — {verdict} ({level})",
        audited(report),
        plural(sum.tensors, "tensor"),
        plural(sum.storages, "storage"),
        human_bytes(sum.bytes),
        plural(sum.errors, "error"),
        plural(sum.warnings, "warning"),
        plural(sum.infos, "info"),
        if sum.suppressed > 0 {
            format!("{} suppressed, ", sum.suppressed)
        } else {
            String::new()
        },
        report.skipped.len()
    )?;
    if let Some(line) = by_rule(report) {
        writeln!(out, "{line}")?;
    }
    Ok(out)
}

/// What the summary line says was audited: files, or a running process's objects by name
/// (`live: <live ResNet>`), which are no files.
fn audited(report: &Report) -> String {
    let live = !report.files.is_empty()
        && report
            .files
            .iter()
            .all(|f| f.format.as_deref() == Some("live"));
    match (live, report.files.as_slice()) {
        (true, [one]) => format!("live: {}", shown(&one.path)),
        (true, all) => format!("live: {}", plural(all.len(), "object")),
        (false, _) => plural(report.summary.files, "file"),
    }
}

/// One entry of a file's findings: a finding, or several of one rule that differ only in
/// their subject ([`Finding::subject`]: TP501's globals), listed under their one text.
struct Entry<'a> {
    first: &'a Finding,
    /// The subjects and the shared rest, when several findings make the entry.
    subjects: Vec<&'a str>,
    rest: &'a str,
}

/// A rule's findings in one file as entries, in the order of each entry's first finding:
/// findings whose severity, rest of message, fix, tensors and storage agree make one.
fn entries<'a>(findings: &[&'a Finding]) -> Vec<Entry<'a>> {
    let mut out: Vec<Entry<'a>> = Vec::new();
    for &f in findings {
        let Some((subject, rest)) = f.subject() else {
            out.push(Entry {
                first: f,
                subjects: Vec::new(),
                rest: "",
            });
            continue;
        };
        let same = |e: &Entry<'_>| {
            !e.subjects.is_empty()
                && e.rest == rest
                && e.first.severity == f.severity
                && e.first.fix == f.fix
                && e.first.tensors == f.tensors
                && e.first.storage == f.storage
        };
        match out.iter_mut().find(|e| same(e)) {
            Some(entry) => entry.subjects.push(subject),
            None => out.push(Entry {
                first: f,
                subjects: vec![subject],
                rest,
            }),
        }
    }
    out
}

impl Entry<'_> {
    fn write(&self, out: &mut String, style: Style) -> std::fmt::Result {
        let f = self.first;
        let head = format!(
            "  {}[{}] {}",
            style.severity(f.severity),
            f.code,
            f.code.name()
        );
        match self.subjects.as_slice() {
            // One finding: its whole message, as every other report gives it.
            [] | [_] => writeln!(out, "{head}: {}", shown(&f.message))?,
            several => {
                writeln!(out, "{head} ({}): {}", several.len(), shown(self.rest))?;
                let listed = if style.verbose {
                    several
                } else {
                    several.get(..MAX_TENSORS_LISTED).unwrap_or(several)
                };
                for subject in listed {
                    writeln!(out, "    - {}", shown(subject))?;
                }
                if listed.len() < several.len() {
                    writeln!(
                        out,
                        "    … and {} more (--verbose lists all)",
                        several.len() - listed.len()
                    )?;
                }
            }
        }
        if !f.tensors.is_empty() {
            writeln!(
                out,
                "    tensors: {}",
                shown(&tensor_list(&f.tensors, style.verbose))
            )?;
        }
        writeln!(out, "    fix: {}", shown(&f.fix))
    }
}

/// The closing line: how many findings each rule made, most first, and where a rule is
/// explained (`8 TP501 unsafe-global, 1 TP101 view-overlap; run …`). `None` without findings.
fn by_rule(report: &Report) -> Option<String> {
    let mut counts: Vec<(Code, usize)> = Vec::new();
    for f in report.files.iter().flat_map(|file| &file.findings) {
        match counts.iter_mut().find(|(code, _)| *code == f.code) {
            Some((_, n)) => *n += 1,
            None => counts.push((f.code, 1)),
        }
    }
    if counts.is_empty() {
        return None;
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let listed: Vec<String> = counts
        .iter()
        .map(|(code, n)| format!("{n} {code} {}", code.name()))
        .collect();
    Some(format!(
        "{}; run `tensorplay explain CODE` for what a rule checks and how to fix it",
        listed.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorplay_audit::registry::RULES;
    use tensorplay_audit::report::{FailOn, FileReport};

    fn report(tensors: usize) -> Report {
        let code = RULES[0].code();
        let names: Vec<String> = (0..tensors).map(|i| format!("layers.{i}.weight")).collect();
        let file = FileReport {
            remote: None,
            path: "many.safetensors".into(),
            format: Some("safetensors".into()),
            tensors,
            storages: tensors,
            bytes: 4 * tensors as u64,
            devices: vec!["cpu".into()],
            dtypes: vec!["float32".into()],
            checked: vec![code],
            findings: vec![Finding {
                code,
                severity: Severity::Warning,
                tensors: names,
                storage: None,
                message: "a finding over many tensors".into(),
                fix: "fix them".into(),
                global: None,
                template: None,
                payload: String::new(),
                fingerprint: String::new(),
            }],
            suppressed: Vec::new(),
            allowed_globals: Vec::new(),
            memory: None,
            device: None,
            inventory: None,
            layout: None,
        };
        Report::new(vec![file], Vec::new(), FailOn::Error)
    }

    fn plain(verbose: bool) -> Style {
        Style {
            color: false,
            verbose,
        }
    }

    #[test]
    fn many_tensors_are_cut_to_the_first_ten_and_counted() {
        let text = render(&report(25), plain(false)).unwrap();
        insta::assert_snapshot!("human_many_tensors_cut", text);
        assert!(text.contains("layers.9.weight … and 15 more"), "{text}");
        assert!(!text.contains("layers.10.weight"), "{text}");
    }

    #[test]
    fn verbose_lists_every_tensor() {
        let text = render(&report(25), plain(true)).unwrap();
        insta::assert_snapshot!("human_many_tensors_verbose", text);
        assert!(
            text.contains("layers.23.weight, layers.24.weight\n"),
            "{text}"
        );
        assert!(!text.contains("more"), "{text}");
    }

    #[test]
    fn a_live_audit_names_its_object_not_a_file() {
        let mut live = report(2);
        live.files[0].path = "<live ResNet>".into();
        live.files[0].format = Some("live".into());
        let text = render(&live, plain(false)).unwrap();
        let summary = text
            .lines()
            .find(|l| l.contains(" skipped — "))
            .expect("summary");
        assert!(
            summary.starts_with("live: <live ResNet>, 2 tensors"),
            "{summary}"
        );
        assert!(!summary.contains("file"), "{summary}");
        // A file's report still counts files.
        let text = render(&report(2), plain(false)).unwrap();
        assert!(text.contains("1 file, 2 tensors"), "{text}");
    }

    #[test]
    fn ten_tensors_are_listed_without_a_count() {
        let text = render(&report(10), plain(false)).unwrap();
        assert!(text.contains("layers.9.weight\n"), "{text}");
        assert!(!text.contains("more"), "{text}");
    }
}
