//! `--html FILE`: the design's `fragmentation_report.html`. One self-contained page (inline
//! CSS and SVG, no script, nothing fetched, so it opens offline and from a CI artifact):
//! the verdict, the findings, per checkpoint its storage sizes, TP301's score and the
//! simulated segment map, and a time series per run of checkpoints.

mod charts;
mod segments;
mod series;

// XML's attribute escaping is safe in HTML text and double-quoted attributes alike, and
// makes control characters from a hostile name visible.
use super::xml::attr as escape;

use std::fmt::Write;
use tensorplay_audit::finding::Finding;
use tensorplay_audit::report::{FileReport, Report};
use tensorplay_audit::text::{human_bytes, plural};

const STYLE: &str = "\
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#1d2330;padding:0 16px}
h1{font-size:22px;margin:0 0 12px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #dde}
h3{font-size:15px;margin:18px 0 6px;word-break:break-all}
.verdict{padding:10px 14px;border-radius:6px;font-weight:600}
.pass{background:#e3f6e8;color:#135c2a}.fail{background:#fde6e6;color:#8a1111}
table{border-collapse:collapse;width:100%;font-size:13px;table-layout:fixed}
th.c-rule{width:170px}th.c-sev{width:80px}th.c-ten{width:120px}th.c-fix{width:220px}
th,td{text-align:left;padding:4px 6px;border-bottom:1px solid #e4e6ee;vertical-align:top}
td.path,td.tensors,td{overflow-wrap:anywhere}
tr.file th{background:#f3f4f8;word-break:break-all;font-weight:600}
.sev-error{color:#b00020;font-weight:600}.sev-warning{color:#a05a00;font-weight:600}
.sev-info{color:#1b5e9a}.suppressed{opacity:.55}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:6px 0}dt{color:#5a6275}dd{margin:0}
.over{color:#b00020;font-weight:600}.under{color:#135c2a;font-weight:600}
.note{color:#5a6275;font-size:12px}ul.holds{margin:2px 0 8px;padding-left:18px}
svg{display:block;max-width:100%;height:auto;margin:6px 0}
.pair{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:0 16px}
.axistitle{font-size:11px;fill:#1d2330}
.axis{stroke:#99a}.tick,.seglabel{font-size:11px;fill:#5a6275}
.bar{fill:#4a78c2}.line{fill:none;stroke:#4a78c2;stroke-width:2}.point{fill:#4a78c2}
.threshold{stroke:#b00020;stroke-dasharray:5 4}
.segment{fill:#f3f4f8;stroke:#c6c9d6}.block{stroke:#fff;stroke-width:.5}
.free{fill:#d8dae3;stroke:#fff;stroke-width:.5}.blocklabel{font-size:10px;fill:#fff}
";

pub fn render(report: &Report) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"/>\
         <title>tensorplay: {audited}</title><style>{STYLE}</style></head><body>",
        audited = escape(&audited(&report.files))
    )?;
    writeln!(
        out,
        "<h1>tensorplay fragmentation report</h1><p class=\"note\">{}; {} {}</p>",
        escape(&audited(&report.files)),
        escape(&report.tool.name),
        escape(&report.tool.version)
    )?;
    verdict(report, &mut out)?;
    // The design's report leads with how a run of checkpoints evolves.
    time_series(report, &mut out)?;
    findings(report, &mut out)?;
    writeln!(out, "<section id=\"checkpoints\"><h2>Checkpoints</h2>")?;
    for (i, file) in natural_order(&report.files).into_iter().enumerate() {
        checkpoint(i, file, &mut out)?;
    }
    writeln!(out, "</section>")?;
    skipped(report, &mut out)?;
    writeln!(out, "</body></html>")?;
    Ok(out)
}

/// What was audited, for the page's title (a browser tab, an artifact list): each folder
/// holding several checkpoints as the folder, any other checkpoint by its path, the first
/// three in natural order.
fn audited(files: &[FileReport]) -> String {
    const SHOWN: usize = 3;
    let mut names: Vec<String> = Vec::new();
    for file in natural_order(files) {
        let dir = parent(&file.path);
        let siblings = files.iter().filter(|f| parent(&f.path) == dir).count();
        let name = match dir {
            Some(dir) if siblings > 1 => dir.to_owned(),
            _ => file.path.clone(),
        };
        if !names.contains(&name) {
            names.push(name);
        }
    }
    match names.len() {
        0 => "no checkpoints".to_owned(),
        n if n > SHOWN => format!("{} and {} more", names[..SHOWN].join(", "), n - SHOWN),
        _ => names.join(", "),
    }
}

/// The folder part of a report path, its last `/` included.
fn parent(path: &str) -> Option<&str> {
    path.rfind('/').and_then(|at| path.get(..=at))
}

/// Files in natural order: `epoch_10` after `epoch_9`.
fn natural_order(files: &[FileReport]) -> Vec<&FileReport> {
    let mut files: Vec<&FileReport> = files.iter().collect();
    files.sort_by_cached_key(|f| series::natural_key(&f.path));
    files
}

fn verdict(report: &Report, out: &mut String) -> anyhow::Result<()> {
    let s = &report.summary;
    let (class, word) = if s.passed {
        ("pass", "PASSED")
    } else {
        ("fail", "FAILED")
    };
    writeln!(
        out,
        "<section id=\"verdict\"><div class=\"verdict {class}\">{word} (--fail-on {}): \
         {}, {}, {}, {} suppressed</div>\
         <p>{}, {}, {}, {} of storage bytes; {} skipped.</p></section>",
        super::fail_on_name(s.fail_on),
        plural(s.errors, "error"),
        plural(s.warnings, "warning"),
        plural(s.infos, "info"),
        s.suppressed,
        plural(s.files, "checkpoint"),
        plural(s.tensors, "tensor"),
        plural(s.storages, "storage"),
        human_bytes(s.bytes),
        plural(report.skipped.len(), "file")
    )?;
    Ok(())
}

fn findings(report: &Report, out: &mut String) -> anyhow::Result<()> {
    writeln!(out, "<section id=\"findings\"><h2>Findings</h2>")?;
    let any = report
        .files
        .iter()
        .any(|f| !f.findings.is_empty() || !f.suppressed.is_empty());
    if !any {
        writeln!(out, "<p>No findings.</p></section>")?;
        return Ok(());
    }
    writeln!(
        out,
        "<table><thead><tr><th class=\"c-rule\">Rule</th><th class=\"c-sev\">Severity</th>\
         <th class=\"c-ten\">Tensors</th><th>Message</th><th class=\"c-fix\">Fix</th></tr></thead><tbody>"
    )?;
    for file in natural_order(&report.files) {
        if file.findings.is_empty() && file.suppressed.is_empty() {
            continue;
        }
        // The path heads its findings: a column of paths would squeeze the messages.
        writeln!(
            out,
            "<tr class=\"file\"><th colspan=\"5\">{}</th></tr>",
            escape(&file.path)
        )?;
        for f in &file.findings {
            finding_row(f, false, out)?;
        }
        for f in &file.suppressed {
            finding_row(f, true, out)?;
        }
    }
    writeln!(out, "</tbody></table></section>")?;
    Ok(())
}

fn finding_row(f: &Finding, suppressed: bool, out: &mut String) -> anyhow::Result<()> {
    let (row, note) = if suppressed {
        (" suppressed", " (baseline)")
    } else {
        ("", "")
    };
    writeln!(
        out,
        "<tr class=\"finding{row}\"><td class=\"rule\">{} {}</td>\
         <td class=\"sev-{sev}\">{sev}{note}</td><td class=\"tensors\">{}</td><td>{}</td><td>{}</td></tr>",
        f.code,
        escape(f.code.name()),
        escape(&f.tensors.join(", ")),
        escape(&f.message),
        escape(&f.fix),
        sev = f.severity.name(),
    )?;
    Ok(())
}

fn checkpoint(i: usize, file: &FileReport, out: &mut String) -> anyhow::Result<()> {
    writeln!(
        out,
        "<section class=\"checkpoint\" id=\"checkpoint-{i}\"><h3>{}</h3>",
        escape(&file.path)
    )?;
    let Some(format) = &file.format else {
        writeln!(out, "<p>Not readable: see its findings.</p></section>")?;
        return Ok(());
    };
    let list = |items: &[String]| {
        if items.is_empty() {
            "none".to_owned()
        } else {
            escape(&items.join(", "))
        }
    };
    writeln!(
        out,
        "<dl><dt>format</dt><dd>{}</dd><dt>tensors / storages</dt><dd>{} / {} ({})</dd>\
         <dt>devices</dt><dd>{}</dd><dt>dtypes</dt><dd>{}</dd><dt>findings</dt><dd>{}</dd>",
        escape(format),
        file.tensors,
        file.storages,
        human_bytes(file.bytes),
        list(&file.devices),
        list(&file.dtypes),
        file.findings.len()
    )?;
    if let Some(r) = &file.remote {
        writeln!(
            out,
            "<dt>read remotely</dt><dd>{} of {} in {}{}</dd>",
            human_bytes(r.bytes_read),
            human_bytes(r.size),
            plural(r.requests as usize, "request"),
            if r.values_read {
                ""
            } else {
                "; tensor values not read (--deep reads them)"
            }
        )?;
    }
    if let Some(m) = &file.memory {
        writeln!(
            out,
            "<dt>simulated load</dt><dd>{} requested, {} allocated, {} reserved in {} \
             ({:.1}% reserved but unallocated)</dd>",
            human_bytes(m.requested_bytes),
            human_bytes(m.allocated_bytes),
            human_bytes(m.reserved_bytes),
            plural(m.segments, "segment"),
            m.fragmentation * 100.0
        )?;
    }
    let Some(layout) = &file.layout else {
        writeln!(out, "</dl></section>")?;
        return Ok(());
    };
    let threshold = layout.fragmentation_threshold;
    match layout.fragmentation_score {
        Some(score) => {
            let class = if score > threshold { "over" } else { "under" };
            writeln!(
                out,
                "<dt>fragmentation score</dt><dd><span class=\"score {class}\">{score:.2}</span> \
                 against threshold {threshold} (TP301: variance / mean² of storage sizes)</dd></dl>"
            )?;
        }
        None => writeln!(
            out,
            "<dt>fragmentation score</dt><dd>none (fewer than two storages, or all empty)</dd></dl>"
        )?,
    }
    writeln!(
        out,
        "<h4>Storage sizes</h4>{}<h4>Simulated segment map</h4>{}</section>",
        charts::histogram(&layout.size_bins),
        segments::segment_map(&layout.segments, &layout.storage_tensors)
    )?;
    Ok(())
}

fn time_series(report: &Report, out: &mut String) -> anyhow::Result<()> {
    let runs = series::runs(&report.files);
    if runs.is_empty() {
        return Ok(());
    }
    writeln!(out, "<section id=\"series\"><h2>Across checkpoints</h2>")?;
    for (pattern, files) in runs {
        let labels: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
        let score = |f: &&FileReport| f.layout.as_ref().and_then(|l| l.fragmentation_score);
        let threshold = files
            .iter()
            .find_map(|f| f.layout.as_ref().map(|l| l.fragmentation_threshold));
        let scores: Vec<Option<f64>> = files.iter().map(score).collect();
        let unallocated: Vec<Option<f64>> = files
            .iter()
            .map(|f| f.memory.as_ref().map(|m| m.fragmentation * 100.0))
            .collect();
        let reserved: Vec<Option<f64>> = files
            .iter()
            .map(|f| f.memory.as_ref().map(|m| m.reserved_bytes as f64))
            .collect();
        let counts: Vec<Option<f64>> = files
            .iter()
            .map(|f| Some(f.findings.len() as f64))
            .collect();
        writeln!(
            out,
            "<div class=\"run\"><h3>{}</h3><div class=\"pair\"><div><h4>Fragmentation score (TP301)</h4>{}</div>\
             <div><h4>Reserved but unallocated</h4>{}</div></div><div class=\"pair\"><div><h4>Reserved bytes</h4>{}</div>\
             <div><h4>Findings</h4>{}</div></div></div>",
            escape(&pattern),
            charts::line_chart(
                "variance / mean²",
                &labels,
                &scores,
                threshold,
                None,
                |v| format!("{v:.2}")
            ),
            charts::line_chart(
                "% of reserved",
                &labels,
                &unallocated,
                None,
                Some(100.0),
                |v| format!("{v:.1}%")
            ),
            charts::line_chart("bytes", &labels, &reserved, None, None, |v| human_bytes(
                v as u64
            )),
            charts::line_chart("findings", &labels, &counts, None, None, |v| format!(
                "{v:.0}"
            )),
        )?;
    }
    writeln!(out, "</section>")?;
    Ok(())
}

fn skipped(report: &Report, out: &mut String) -> anyhow::Result<()> {
    if report.skipped.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "<section id=\"skipped\"><h2>Not audited</h2><table><tbody>"
    )?;
    for s in &report.skipped {
        writeln!(
            out,
            "<tr><td class=\"path\">{}</td><td>{}</td></tr>",
            escape(&s.path),
            escape(&s.reason)
        )?;
    }
    writeln!(out, "</tbody></table></section>")?;
    Ok(())
}
