//! Inputs are read-only and unchanged: a full audit of `fixtures/`, writing every report,
//! leaves every file, link and folder there exactly as it was, and adds none.

use crate::common::{root, stderr, tensorplay};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What one entry under `fixtures/` is: its kind, its content's hash (a file) or its target
/// (a link), and its permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    content: String,
    mode: u32,
}

#[cfg(unix)]
fn mode(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode()
}

#[cfg(not(unix))]
fn mode(meta: &std::fs::Metadata) -> u32 {
    u32::from(meta.permissions().readonly())
}

/// Every entry under `dir`, links not followed, by path relative to `base`.
fn snapshot(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    for entry in std::fs::read_dir(dir).expect("fixture folder") {
        let path = entry.expect("dir entry").path();
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        let relative = path.strip_prefix(base).expect("under base").to_owned();
        let (kind, content) = if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).expect("link target");
            ("link", target.display().to_string())
        } else if meta.is_dir() {
            snapshot(base, &path, out);
            ("folder", String::new())
        } else if meta.is_file() {
            let bytes = std::fs::read(&path).expect("fixture bytes");
            let hash = Sha256::digest(&bytes);
            let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
            ("file", format!("{hex} ({} bytes)", bytes.len()))
        } else {
            ("other", String::new())
        };
        out.insert(
            relative,
            Entry {
                kind,
                content,
                mode: mode(&meta),
            },
        );
    }
}

fn fixtures() -> BTreeMap<PathBuf, Entry> {
    let base = root().join("fixtures");
    let mut out = BTreeMap::new();
    snapshot(&base, &base, &mut out);
    out
}

#[test]
fn a_full_audit_with_every_report_changes_no_input() {
    let before = fixtures();
    assert!(before.len() > 100, "{} entries", before.len());
    let reports = std::env::temp_dir().join(format!("tensorplay-read-only-{}", std::process::id()));
    let report = |name: &str| reports.join(name).to_str().expect("utf-8").to_owned();
    let (json, junit, html, sarif, codequality, baseline) = (
        report("r.json"),
        report("r.xml"),
        report("r.html"),
        report("r.sarif"),
        report("cq.json"),
        report("baseline.json"),
    );
    let out = tensorplay(&[
        "audit",
        "--format",
        "human",
        "--json",
        &json,
        "--junit",
        &junit,
        "--html",
        &html,
        "--sarif",
        &sarif,
        "--gitlab-codequality",
        &codequality,
        "--write-baseline",
        &baseline,
        "fixtures/",
    ]);
    // The fixtures hold hostile files: the run fails, but it runs to the end.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    for written in [&json, &junit, &html, &sarif, &codequality, &baseline] {
        let len = std::fs::metadata(written).map_or(0, |m| m.len());
        assert!(len > 0, "{written} was not written");
    }
    std::fs::remove_dir_all(&reports).ok();

    let after = fixtures();
    let appeared: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p)).collect();
    assert!(
        appeared.is_empty(),
        "appeared under fixtures/: {appeared:?}"
    );
    let changed: Vec<(&PathBuf, &Entry, Option<&Entry>)> = before
        .iter()
        .filter(|(p, e)| after.get(*p) != Some(*e))
        .map(|(p, e)| (p, e, after.get(p)))
        .collect();
    assert!(changed.is_empty(), "changed under fixtures/: {changed:#?}");
}
