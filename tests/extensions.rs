//! One list of checkpoint names: the loader table's extensions and exact file names (the
//! engine's `checkpoint_extensions` and `checkpoint_file_names`) generated into the pre-commit
//! manifests' `files:` patterns and the docs' lists. Run with `TENSORPLAY_BLESS=1` to write
//! them; otherwise a copy that drifted fails, naming the file.

use crate::common::root;
use tensorplay_engine::load::{checkpoint_extensions, checkpoint_file_names};

const MANIFESTS: [&str; 2] = [
    ".pre-commit-hooks.yaml",
    "pre-commit-mirror/.pre-commit-hooks.yaml",
];
const DOCS: [&str; 2] = ["docs/ci.md", "docs/formats.md"];
const OPEN: &str = "<!-- extensions -->";
const CLOSE: &str = "<!-- /extensions -->";
const NAMES_OPEN: &str = "<!-- file-names -->";
const NAMES_CLOSE: &str = "<!-- /file-names -->";

/// The manifests' pattern (Python's `re`, as pre-commit reads it): any listed extension in any
/// case, or a sharded checkpoint's index; or a file named exactly as a loader opens it (case as
/// written: the Hub's names are case-sensitive), in any folder.
fn files_pattern() -> String {
    let names: Vec<String> = checkpoint_file_names()
        .iter()
        .map(|n| regex_escape(n))
        .collect();
    format!(
        r"(?i:\.({})|\.index\.json)$|(^|/)({})$",
        checkpoint_extensions().join("|"),
        names.join("|")
    )
}

/// `text` as a regular expression matching it literally.
fn regex_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if r"\.^$|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn docs_list() -> String {
    let names: Vec<String> = checkpoint_extensions()
        .iter()
        .map(|e| format!("`.{e}`"))
        .collect();
    names.join(", ")
}

fn docs_names() -> String {
    let names: Vec<String> = checkpoint_file_names()
        .iter()
        .map(|n| format!("`{n}`"))
        .collect();
    names.join(", ")
}

/// `text` with each list between `open` and `close` made `list`.
fn fill(text: &str, open: &str, close: &str, list: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find(open) {
        let (before, after) = rest.split_at(at + open.len());
        let end = after.find(close).expect("a closing marker");
        out.push_str(before);
        out.push_str(list);
        rest = &after[end..];
    }
    out.push_str(rest);
    out
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
    let text = fill(text, OPEN, CLOSE, &docs_list());
    fill(&text, NAMES_OPEN, NAMES_CLOSE, &docs_names())
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
    // And the names the template reader opens, whatever their extension.
    let names = checkpoint_file_names();
    for name in [
        "tokenizer_config.json",
        "chat_template.jinja",
        "chat_template.json",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
        assert!(
            files_pattern().contains(&regex_escape(name)),
            "{name} is not in the pattern"
        );
    }
    assert_eq!(regex_escape("a.b"), r"a\.b");
    let files = MANIFESTS
        .iter()
        .map(|f| (f, true))
        .chain(DOCS.iter().map(|f| (f, false)));
    for (file, manifest) in files {
        let path = root().join(file);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(manifest || text.contains(OPEN), "{file} has no {OPEN} list");
        assert!(
            manifest || *file != "docs/ci.md" || text.contains(NAMES_OPEN),
            "{file} has no {NAMES_OPEN} list"
        );
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
