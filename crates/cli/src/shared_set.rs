//! A sharded set divided by shard across parts, put back together by `merge`: every part
//! that held a share read the whole set's metadata and judged it in full, and scanned only
//! its own files' bytes. Their reports must agree on everything but the byte-reading rules'
//! findings, which are joined in the order one run gives them (the set's tensor order).

use crate::rules_bytes::reads_bytes;
use std::collections::BTreeMap;
use tensorplay_audit::finding::Finding;
use tensorplay_audit::report::FileReport;

/// One set's reports from the parts that shared it (`source`, report), first part first, and
/// the position in the set of every tensor their byte-reading findings name.
pub fn combine(
    group: Vec<(String, FileReport)>,
    order: &BTreeMap<String, usize>,
) -> anyhow::Result<FileReport> {
    let mut group = group.into_iter();
    let (first_source, first) = group.next().expect("a set has at least one part");
    let judged = without_scans(&first);
    let mut scanned: Vec<Finding> = Vec::new();
    let mut scanned_suppressed: Vec<Finding> = Vec::new();
    let mut take = |report: &FileReport| {
        scanned.extend(report.findings.iter().filter(|f| reads_bytes(f)).cloned());
        scanned_suppressed.extend(report.suppressed.iter().filter(|f| reads_bytes(f)).cloned());
    };
    take(&first);
    for (source, report) in group {
        // Everything but the scans was judged from the same metadata: a difference means
        // parts of different runs (other options, other bytes on disk).
        if without_scans(&report) != judged {
            anyhow::bail!(
                "{source} and {first_source} judged {} differently beyond the bytes each scanned: parts of different runs",
                report.path
            );
        }
        take(&report);
    }
    let mut merged = first;
    merged.findings = join(merged.findings, scanned, &merged.checked, order);
    merged.suppressed = join(
        merged.suppressed,
        scanned_suppressed,
        &merged.checked,
        order,
    );
    Ok(merged)
}

/// A report's JSON without its byte-reading findings and without fingerprints (the merged
/// report sets those again).
fn without_scans(report: &FileReport) -> serde_json::Value {
    let mut copy = report.clone();
    copy.findings.retain(|f| !reads_bytes(f));
    copy.suppressed.retain(|f| !reads_bytes(f));
    for finding in copy.findings.iter_mut().chain(&mut copy.suppressed) {
        finding.fingerprint.clear();
    }
    serde_json::to_value(&copy).unwrap_or_default()
}

/// `findings` (one part's, in rule order) with its byte-reading findings replaced by every
/// part's `scanned`, placed where their rules stand and ordered by tensor.
fn join(
    findings: Vec<Finding>,
    mut scanned: Vec<Finding>,
    checked: &[tensorplay_audit::Code],
    order: &BTreeMap<String, usize>,
) -> Vec<Finding> {
    let rank = |f: &Finding| {
        checked
            .iter()
            .position(|c| *c == f.code)
            .unwrap_or(usize::MAX)
    };
    let at = |f: &Finding| {
        f.tensors
            .first()
            .and_then(|name| order.get(name))
            .copied()
            .unwrap_or(usize::MAX)
    };
    scanned.sort_by_key(|f| (rank(f), at(f)));
    let Some(first_scan) = scanned.first().map(rank) else {
        return findings.into_iter().filter(|f| !reads_bytes(f)).collect();
    };
    let (before, after): (Vec<Finding>, Vec<Finding>) = findings
        .into_iter()
        .filter(|f| !reads_bytes(f))
        .partition(|f| rank(f) < first_scan);
    before.into_iter().chain(scanned).chain(after).collect()
}
