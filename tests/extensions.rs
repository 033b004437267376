//! One list of checkpoint names: the loader table's extensions (the engine's
//! `checkpoint_extensions`) generated into the pre-commit manifests' `files:` patterns and the
//! docs' lists. Run with `TENSORPLAY_BLESS=1` to write them; otherwise a copy that drifted
//! fails, naming the file.

use crate::common::root;
use tensorplay_engine::load::checkpoint_extensions;

const MANIFESTS: [&str; 2] = [
    ".pre-commit-hooks.yaml",
    "pre-commit-mirror/.pre-commit-hooks.yaml",
];
const DOCS: [&str; 2] = ["docs/ci.md", "docs/formats.md"];
const OPEN: &str = "<!-- extensions -->";
const CLOSE: &str = "<!-- /extensions -->";

/// The manifests' pattern: any listed extension, or a sharded checkpoint's index.
fn files_pattern() -> String {
    format!(
        r"(?i)(\.({})|\.index\.json)$",
        checkpoint_extensions().join("|")
    )
}

fn docs_list() -> String {
    let names: Vec<String> = checkpoint_extensions()
        .iter()
        .map(|e| format!("`.{e}`"))
        .collect();
    names.join(", ")
}

/// `text` with the manifest's `files:` line, or the docs' marked list, made `generated`.
fn regenerate(text: &str, manifest: bool) -> String {
    if manifest {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("files:"))
            .expect("a files: line");
        let indent = &line[..line.len() - line.trim_start().len()];
        return text.replacen(line, &format!("{indent}files: {}", files_pattern()), 1);
    }
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        let (before, after) = rest.split_at(at + OPEN.len());
        let end = after.find(CLOSE).expect("a closing marker");
        out.push_str(before);
        out.push_str(&docs_list());
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_manifests_and_docs_list_the_loader_tables_names() {
    let bless = std::env::var_os("TENSORPLAY_BLESS").is_some();
    let expected = checkpoint_extensions();
    // What the table must name at least: the formats users commit.
    for ext in [
        "safetensors",
        "pt",
        "pt2",
        "npy",
        "npz",
        "gguf",
        "joblib",
        "pkl",
    ] {
        assert!(expected.contains(&ext), "{ext} missing from {expected:?}");
    }
    let files = MANIFESTS
        .iter()
        .map(|f| (f, true))
        .chain(DOCS.iter().map(|f| (f, false)));
    for (file, manifest) in files {
        let path = root().join(file);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(manifest || text.contains(OPEN), "{file} has no {OPEN} list");
        let generated = regenerate(&text, manifest);
        if bless {
            std::fs::write(&path, &generated).expect("write");
        } else {
            assert!(
                generated == text,
                "{file}'s checkpoint names differ from the loader table's; \
                 run `TENSORPLAY_BLESS=1 cargo test extensions` to regenerate"
            );
        }
    }
}
