//! `audit --partition K/N` and `merge`: the parts of every fixture directory are disjoint,
//! cover it, and merge back into the unpartitioned report and exit code; parts that do not
//! add up to one run (missing, twice, foreign, altered) are refused with exit 2.

use crate::common::{root, stderr, tensorplay};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A scratch folder of this test process, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tensorplay-partition-{}-{name}",
        std::process::id()
    ));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn read(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// Runs part K of N over `dir`; its exit code and JSON report path.
fn part(dir: &str, k: usize, n: usize, out: &Path) -> (i32, PathBuf) {
    let json = out.join(format!("part-{k}-of-{n}.json"));
    let spec = format!("{k}/{n}");
    let run = tensorplay(&[
        "audit",
        "--color",
        "never",
        "--partition",
        &spec,
        "--json",
        s(&json),
        dir,
    ]);
    (run.status.code().expect("exit code"), json)
}

/// Directories of fixtures: the two format folders and each hostile group.
fn fixture_dirs() -> Vec<String> {
    let mut dirs = vec![
        "fixtures/safetensors".to_owned(),
        "fixtures/pytorch".to_owned(),
    ];
    let hostile = root().join("fixtures/hostile");
    let mut groups: Vec<String> = std::fs::read_dir(&hostile)
        .expect("fixtures/hostile")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .map(|p| {
            format!(
                "fixtures/hostile/{}",
                p.file_name().unwrap().to_string_lossy()
            )
        })
        .collect();
    groups.sort();
    dirs.extend(groups);
    dirs
}

#[test]
fn merged_parts_equal_the_whole_audit_for_every_fixture_directory() {
    let out = scratch("equal");
    let mut compared = 0;
    for dir in fixture_dirs() {
        let whole_json = out.join("whole.json");
        std::fs::remove_file(&whole_json).ok();
        let whole = tensorplay(&["audit", "--color", "never", "--json", s(&whole_json), &dir]);
        let whole_code = whole.status.code().expect("exit code");
        let Some(whole_report) = read(&whole_json) else {
            // Nothing to audit (exit 2 before any report): every part says the same.
            assert_eq!(whole_code, 2, "{dir}: no report, yet exit {whole_code}");
            for n in 1..=4 {
                for k in 1..=n {
                    assert_eq!(part(&dir, k, n, &out).0, 2, "{dir} part {k}/{n}");
                }
            }
            continue;
        };
        let audited: BTreeSet<String> = whole_report["files"]
            .as_array()
            .expect("files")
            .iter()
            .map(|f| f["path"].as_str().expect("path").to_owned())
            .collect();
        for n in 1..=4 {
            let mut reports = Vec::new();
            let mut seen = BTreeSet::new();
            for k in 1..=n {
                let (code, json) = part(&dir, k, n, &out);
                assert!(code <= 2, "{dir} part {k}/{n}: exit {code}");
                let report = read(&json).unwrap_or_else(|| panic!("{dir} part {k}/{n}: no report"));
                let partition = &report["partition"];
                assert_eq!(
                    (partition["k"].as_u64(), partition["n"].as_u64()),
                    (Some(k as u64), Some(n as u64))
                );
                for input in partition["inputs"].as_array().expect("inputs") {
                    let path = input["path"].as_str().expect("path").to_owned();
                    // A sharded set dealt by shard is in several parts, each shard once.
                    let shard = input["shard"].as_str().map(str::to_owned);
                    assert!(
                        seen.insert((path.clone(), shard.clone())),
                        "{dir}: {path} {shard:?} in two parts of {n}"
                    );
                }
                reports.push(json);
            }
            if whole_code != 2 {
                let seen: BTreeSet<String> = seen.into_iter().map(|(path, _)| path).collect();
                assert_eq!(seen, audited, "{dir}: the {n} parts do not cover the audit");
            }
            let merged_json = out.join(format!("merged-{n}.json"));
            let mut args = vec!["merge", "--color", "never", "--json", s(&merged_json)];
            args.extend(reports.iter().map(|p| s(p)));
            let merged = tensorplay(&args);
            assert_eq!(
                merged.status.code(),
                Some(whole_code),
                "{dir}, {n} parts: merge exit differs: {}",
                stderr(&merged)
            );
            let merged_report = read(&merged_json).expect("merged report");
            assert_eq!(
                merged_report, whole_report,
                "{dir}, {n} parts: merged report differs"
            );
            compared += 1;
        }
    }
    assert!(compared >= 8, "only {compared} merges compared");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn parts_are_balanced_by_bytes_and_sets_are_dealt_by_shard() {
    let out = scratch("balance");
    let dir = "fixtures/safetensors";
    let mut loads = Vec::new();
    let mut set_bytes = 0;
    let mut set_shards = BTreeSet::new();
    for k in 1..=2 {
        let (_, json) = part(dir, k, 2, &out);
        let report = read(&json).expect("report");
        let inputs = report["partition"]["inputs"]
            .as_array()
            .expect("inputs")
            .clone();
        // A sharded set is dealt as its shards, each named by the index; together they weigh
        // the index and its shards.
        for input in &inputs {
            let path = input["path"].as_str().unwrap();
            assert!(
                !path.starts_with("fixtures/safetensors/sharded/model-"),
                "{path} split out of its set"
            );
            if path == "fixtures/safetensors/sharded/model.safetensors.index.json" {
                set_bytes += input["bytes"].as_u64().unwrap();
                set_shards.insert(input["shard"].as_str().expect("a shard").to_owned());
            }
        }
        loads.push(
            inputs
                .iter()
                .map(|i| i["bytes"].as_u64().unwrap())
                .sum::<u64>(),
        );
        let largest = inputs
            .iter()
            .map(|i| i["bytes"].as_u64().unwrap())
            .max()
            .unwrap_or(0);
        loads.push(largest);
    }
    // Greedy largest-first: the parts differ by at most the largest input.
    let (a, largest_a, b, largest_b) = (loads[0], loads[1], loads[2], loads[3]);
    assert!(
        a.abs_diff(b) <= largest_a.max(largest_b),
        "unbalanced: {a} vs {b}"
    );
    let files = [
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    let on_disk: u64 = files
        .iter()
        .map(|f| {
            std::fs::metadata(root().join("fixtures/safetensors/sharded").join(f))
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(set_bytes, on_disk);
    assert_eq!(
        set_shards.into_iter().collect::<Vec<_>>(),
        &files[1..],
        "each shard once"
    );
    std::fs::remove_dir_all(&out).ok();
}

/// Parts 1..=3 of a run over `dir`, in `out`.
fn three_parts(dir: &str, out: &Path) -> Vec<PathBuf> {
    (1..=3).map(|k| part(dir, k, 3, out).1).collect()
}

fn merge_fails(parts: &[&Path], expected: &str) {
    let mut args = vec!["merge", "--color", "never"];
    args.extend(parts.iter().map(|p| s(p)));
    let run = tensorplay(&args);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "merge should fail: {err}");
    assert!(err.contains(expected), "expected '{expected}' in: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
}

#[test]
fn a_missing_duplicated_or_foreign_part_is_refused() {
    let out = scratch("refuse");
    let ours = three_parts("fixtures/safetensors", &out);
    let other_dir = out.join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let foreign = three_parts("fixtures/pytorch", &other_dir);

    merge_fails(
        &[&ours[0], &ours[1]],
        "missing part 3 of 3 (given 2 reports)",
    );
    // A part given twice counts once (a retried job's copy): still one missing.
    merge_fails(
        &[&ours[0], &ours[1], &ours[1]],
        "missing part 3 of 3 (given 2 reports)",
    );
    merge_fails(&[&ours[0], &ours[1], &foreign[2]], "different runs");

    // Another N.
    let (_, half) = part("fixtures/safetensors", 2, 2, &out);
    merge_fails(&[&ours[0], &ours[1], &half], "different runs");

    // A report written without --partition.
    let whole = out.join("whole.json");
    tensorplay(&["audit", "--json", s(&whole), "fixtures/safetensors"]);
    merge_fails(&[&whole], "not a partial report");

    // An input moved from one part's list to another's: no longer one run's split.
    let mut first = read(&ours[0]).unwrap();
    let mut second = read(&ours[1]).unwrap();
    let moved = first["partition"]["inputs"]
        .as_array_mut()
        .unwrap()
        .pop()
        .expect("an input");
    second["partition"]["inputs"]
        .as_array_mut()
        .unwrap()
        .push(moved);
    let (a, b) = (out.join("altered-1.json"), out.join("altered-2.json"));
    std::fs::write(&a, first.to_string()).unwrap();
    std::fs::write(&b, second.to_string()).unwrap();
    merge_fails(&[&a, &b, &ours[2]], "altered after its audit");

    // A finding deleted, or the verdict's level edited: the part no longer hashes to its
    // digest.
    let findings: usize = ours
        .iter()
        .flat_map(|p| read(p).unwrap()["files"].as_array().unwrap().clone())
        .map(|f| f["findings"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(
        findings > 0,
        "the safetensors fixtures have findings to delete"
    );
    let edited = |edit: &dyn Fn(&mut Value)| {
        let mut copies = Vec::new();
        for (k, path) in ours.iter().enumerate() {
            let mut part = read(path).unwrap();
            edit(&mut part);
            let copy = out.join(format!("edited-{k}.json"));
            std::fs::write(&copy, part.to_string()).unwrap();
            copies.push(copy);
        }
        copies
    };
    let deleted = edited(&|part| {
        for file in part["files"].as_array_mut().unwrap() {
            file["findings"].as_array_mut().unwrap().clear();
        }
    });
    merge_fails(
        &[&deleted[0], &deleted[1], &deleted[2]],
        "altered after its audit",
    );
    let lowered = edited(&|part| part["summary"]["fail_on"] = "never".into());
    merge_fails(
        &[&lowered[0], &lowered[1], &lowered[2]],
        "altered after its audit",
    );

    // Not JSON at all.
    let junk = out.join("junk.json");
    std::fs::write(&junk, "not json").unwrap();
    merge_fails(&[&junk], "not a tensorplay JSON report");
    std::fs::remove_dir_all(&out).ok();
}

/// With `TENSORPLAY_MERGE_KEY` set, parts are sealed with an HMAC: they merge only with the
/// same key, and a part sealed without one is refused.
#[test]
fn keyed_parts_merge_only_with_their_key() {
    let out = scratch("keyed");
    let with_key = |key: Option<&str>, args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tensorplay"));
        cmd.args(args).current_dir(crate::common::root());
        cmd.env_remove("TENSORPLAY_MERGE_KEY")
            .env_remove("GITHUB_ACTIONS")
            .env_remove("GITHUB_STEP_SUMMARY");
        if let Some(key) = key {
            cmd.env("TENSORPLAY_MERGE_KEY", key);
        }
        cmd.output().expect("runs")
    };
    let parts: Vec<PathBuf> = (1..=2).map(|k| out.join(format!("k{k}.json"))).collect();
    for (k, path) in parts.iter().enumerate() {
        let share = format!("{}/2", k + 1);
        let args = [
            "audit",
            "--partition",
            &share,
            "--json",
            s(path),
            "fixtures/safetensors",
        ];
        let run = with_key(Some("s3cret"), &args);
        assert!(
            run.status.code().is_some_and(|c| c <= 1),
            "{}",
            stderr(&run)
        );
        let digest = read(path).unwrap()["partition"]["report_digest"].clone();
        assert!(
            digest.as_str().unwrap().starts_with("hmac-sha256:"),
            "{digest}"
        );
    }
    let merge = |key: Option<&str>| {
        with_key(
            key,
            &["merge", "--color", "never", s(&parts[0]), s(&parts[1])],
        )
    };
    assert!(merge(Some("s3cret")).status.code().is_some_and(|c| c <= 1));
    for (key, expected) in [
        (None, "set TENSORPLAY_MERGE_KEY"),
        (Some("other"), "or the key differs"),
    ] {
        let run = merge(key);
        assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
        assert!(stderr(&run).contains(expected), "{}", stderr(&run));
    }
    // Unkeyed parts are refused while a key is set.
    let (_, plain) = part("fixtures/safetensors", 1, 2, &out);
    let run = with_key(Some("s3cret"), &["merge", s(&plain), s(&parts[1])]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        stderr(&run).contains("written without TENSORPLAY_MERGE_KEY"),
        "{}",
        stderr(&run)
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_bad_partition_is_a_usage_error() {
    for bad in ["0/2", "3/2", "2", "x/y"] {
        let run = tensorplay(&["audit", "--partition", bad, "fixtures/safetensors"]);
        assert_eq!(run.status.code(), Some(2), "--partition {bad}");
    }
}

#[test]
fn merge_writes_every_report_the_audit_writes() {
    let out = scratch("reports");
    let dir = "fixtures/pytorch";
    let reports = |prefix: &str| {
        ["sarif", "gitlab-codequality", "junit", "html"]
            .map(|kind| (kind, out.join(format!("{prefix}.{kind}"))))
    };
    let whole = reports("whole");
    let mut args = vec!["audit", "--color", "never", dir];
    for (kind, path) in &whole {
        args.extend([kind_flag(kind), s(path)]);
    }
    let whole_run = tensorplay(&args);
    let parts: Vec<PathBuf> = (1..=2).map(|k| part(dir, k, 2, &out).1).collect();
    let merged = reports("merged");
    let mut args = vec!["merge", "--color", "never"];
    args.extend(parts.iter().map(|p| s(p)));
    for (kind, path) in &merged {
        args.extend([kind_flag(kind), s(path)]);
    }
    let merged_run = tensorplay(&args);
    assert_eq!(merged_run.status.code(), whole_run.status.code());
    assert_eq!(
        crate::common::stdout(&merged_run),
        crate::common::stdout(&whole_run)
    );
    for ((kind, a), (_, b)) in whole.iter().zip(&merged) {
        let (a, b) = (
            std::fs::read_to_string(a).unwrap(),
            std::fs::read_to_string(b).unwrap(),
        );
        match *kind {
            // The same findings, fingerprints and locations.
            "sarif" | "gitlab-codequality" => assert_eq!(a, b, "{kind} differs"),
            // JUnit carries the time of writing; the HTML report's segment maps are not in
            // the JSON parts: both must still name every finding's rule.
            _ => {
                assert!(
                    b.contains("TP101") && b.contains("TP501"),
                    "{kind} lacks findings"
                );
            }
        }
    }
    std::fs::remove_dir_all(&out).ok();
}

fn kind_flag(kind: &str) -> &'static str {
    match kind {
        "sarif" => "--sarif",
        "gitlab-codequality" => "--gitlab-codequality",
        "junit" => "--junit",
        _ => "--html",
    }
}
