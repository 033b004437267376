//! The shape of the code, checked: the engine's core types and `numeric/` import no reader,
//! and the audit crate's modules import each other without a cycle.

use crate::common::root;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Rust sources under `dir`, recursively, with their text before any `#[cfg(test)]`.
fn sources(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("source");
            let code = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .to_owned();
            out.push((path, code));
        }
    }
    out
}

/// The top-level modules `code` names through `crate::` (`use crate::{a, b::c}` included).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before == Some('$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name = part.trim().split("::").next().unwrap_or_default();
                refs.insert(
                    name.trim_matches(|c: char| !c.is_alphanumeric() && c != '_')
                        .to_owned(),
                );
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            refs.insert(name);
        }
    }
    refs
}

#[test]
fn the_engine_core_and_numeric_import_no_reader() {
    let src = root().join("crates/engine/src");
    // lib.rs only declares the modules. Conversion, which writes files from what readers
    // read, is not core: it is its own crate, crates/convert.
    let outside = ["lib.rs"];
    let mut offenders = Vec::new();
    for (path, code) in sources(&src) {
        let rel = path.strip_prefix(&src).expect("under src");
        let first = rel.components().next().expect("a component");
        let core = rel.components().count() == 1 && !outside.iter().any(|o| rel == Path::new(o));
        let numeric = first.as_os_str() == "numeric";
        if (core || numeric)
            && crate_refs(&code)
                .iter()
                .any(|r| r == "load" || r == "pickle")
        {
            offenders.push(rel.display().to_string());
        }
    }
    assert!(
        offenders.is_empty(),
        "core files importing readers: {offenders:?}"
    );
}

#[test]
fn the_audit_crate_has_no_import_cycle() {
    let src = root().join("crates/audit/src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, code) in sources(&src) {
        let rel = path.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .expect("a component")
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if top == "lib" {
            continue;
        }
        let refs = crate_refs(&code);
        graph.entry(top.clone()).or_default().extend(
            refs.into_iter()
                .map(|r| match r.as_str() {
                    // What lib.rs re-exports, by the module that defines it.
                    "Code" => "code".to_owned(),
                    "Severity" | "Level" => "severity".to_owned(),
                    "Error" | "Result" => "error".to_owned(),
                    "Draft" | "Finding" => "finding".to_owned(),
                    _ => r,
                })
                .filter(|r| *r != top),
        );
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for edges in graph.values_mut() {
        edges.retain(|m| modules.contains(m));
    }
    // Kahn's algorithm: whatever cannot be ordered lies on a cycle.
    let mut remaining = graph.clone();
    loop {
        let leaves: Vec<String> = remaining
            .iter()
            .filter(|(_, deps)| deps.iter().all(|d| !remaining.contains_key(d)))
            .map(|(m, _)| m.clone())
            .collect();
        if leaves.is_empty() {
            break;
        }
        for leaf in leaves {
            remaining.remove(&leaf);
        }
    }
    assert!(
        remaining.is_empty(),
        "modules on an import cycle: {remaining:?}"
    );
    assert!(graph.len() > 15, "found only {:?}", graph.keys());
}

/// `cargo run` and `cargo test` without `-p` build the workspace's default members: every
/// crate but the Python extension, so the README's commands compile no pyo3. Asked of cargo
/// itself, so what is checked is what cargo would build.
#[test]
fn the_default_members_leave_out_the_python_extension() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--offline",
            "--format-version",
            "1",
        ])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let ids = |key: &str| -> BTreeSet<String> {
        meta[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key}"))
            .iter()
            .map(|id| id.as_str().expect("id").to_owned())
            .collect()
    };
    let (members, defaults) = (ids("workspace_members"), ids("workspace_default_members"));
    let packages = meta["packages"].as_array().expect("packages");
    let name_of = |id: &String| -> String {
        let package = packages.iter().find(|p| p["id"] == id.as_str());
        package.expect("a member's package")["name"]
            .as_str()
            .expect("name")
            .to_owned()
    };
    let left_out: Vec<String> = members.difference(&defaults).map(name_of).collect();
    assert_eq!(left_out, ["tensorplay-python"]);
    // Nor does a default member pull pyo3 or the extension in.
    for id in &defaults {
        let package = packages
            .iter()
            .find(|p| p["id"] == id.as_str())
            .expect("package");
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let dep = dep["name"].as_str().expect("dependency name");
            assert!(
                !dep.starts_with("pyo3") && dep != "tensorplay-python",
                "{} depends on {dep}",
                name_of(id)
            );
        }
    }
}
