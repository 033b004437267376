//! Discovery sees what a user loads: symlinks followed (the Hugging Face cache), dot-files,
//! pickles and zips without a checkpoint extension, Git LFS pointers, torch.distributed
//! checkpoints. Fixtures: `fixtures/hostile/discovery/`, whose `truth.json` records what torch,
//! pickle and dcp did with each (`fixtures/hostile/make_discovery.py`).

use crate::common::{read_json, root, stderr, stdout};
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const DIR: &str = "fixtures/hostile/discovery";

fn truth() -> serde_json::Value {
    read_json(&format!("{DIR}/truth.json"))["files"].clone()
}

/// Runs tensorplay in `cwd`, killing it (and failing) if it has not finished in 60 s: a walk
/// that follows a loop must not hang the suite.
fn run_in(cwd: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tensorplay runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("tensorplay {args:?} did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn run(args: &[&str]) -> Output {
    run_in(&root(), args)
}

/// The JSON report of `tensorplay audit --ci-mode --fail-on never ARGS` and its exit code.
fn audit(cwd: &Path, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["audit", "--ci-mode", "--fail-on", "never"];
    full.extend_from_slice(args);
    let out = run_in(cwd, &full);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("JSON report")
}

fn file<'a>(report: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not audited: {report:#}"))
}

fn paths(report: &serde_json::Value, list: &str) -> BTreeSet<String> {
    report[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect()
}

fn skip_reason(report: &serde_json::Value, path: &str) -> String {
    report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not skipped: {report:#}"))["reason"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// (code, message) of every finding of one file.
fn findings(file: &serde_json::Value) -> Vec<(String, String)> {
    file["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_owned(),
                f["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The `module.name` each TP501 finding names ("… references posix.system: …").
fn unsafe_globals(file: &serde_json::Value) -> BTreeSet<String> {
    findings(file)
        .into_iter()
        .filter(|(code, _)| code == "TP501")
        .map(|(_, m)| {
            let named = m.split(" references ").nth(1).expect("names a global");
            named.split(':').next().unwrap().to_owned()
        })
        .collect()
}

fn strings(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

/// `link`'s directory joined with its target, `..` resolved lexically.
fn resolve(link: &str, target: &str) -> String {
    let mut out = PathBuf::new();
    for c in Path::new(link).parent().unwrap().join(target).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.to_string_lossy().into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensorplay-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_hugging_face_cache_is_audited_through_its_symlinks() {
    let truth = truth();
    let links: Vec<(&String, &serde_json::Value)> = truth
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, t)| t.get("symlink_to").is_some())
        .collect();
    assert_eq!(
        links.len(),
        3,
        "pytorch_model.bin, model.safetensors, config.json"
    );
    let cache = format!("{DIR}/hf_cache");
    let snapshot = Path::new(links[0].0).parent().unwrap().to_str().unwrap();
    for walked in [cache.as_str(), snapshot] {
        let r = audit(&root(), &[walked]);
        let mut audited = BTreeSet::new();
        for (link, t) in &links {
            match t["kind"].as_str().unwrap() {
                "JSON, not an index" => assert!(
                    skip_reason(&r, link).starts_with("JSON, not a checkpoint index (symlink to"),
                    "{r:#}"
                ),
                kind => {
                    audited.insert(link.to_string());
                    let f = file(&r, link);
                    let expected =
                        strings(t.get("unsafe_globals").unwrap_or(&serde_json::json!([])));
                    assert_eq!(unsafe_globals(f), expected, "{link} ({kind})");
                }
            }
            if walked == cache {
                // The blob the link points to is the same file: looked at once, under the link.
                let blob = resolve(link, t["symlink_to"].as_str().unwrap());
                assert_eq!(skip_reason(&r, &blob), format!("same file as {link}"));
            }
        }
        assert_eq!(paths(&r, "files"), audited, "{walked}");
        let payload = links
            .iter()
            .find(|(_, t)| t["torch_load"]["payload_ran"] == true)
            .expect("one blob carries a payload");
        assert!(findings(file(&r, payload.0))
            .iter()
            .any(|(c, _)| c == "TP501"));
        // Without --fail-on never, the gate fails.
        assert_eq!(run(&["audit", walked]).status.code(), Some(1), "{walked}");
    }
}

/// What each fixture must fail with; `None` for the clean safetensors in the cache.
fn expected_code(path: &str, t: &serde_json::Value) -> Option<&'static str> {
    match t["kind"].as_str().unwrap() {
        "Git LFS pointer" => Some("TP502"),
        // Its state dict holds a payload object, a bytes item dcp.load runs.
        "torch.distributed.checkpoint directory" => Some("TP501"),
        "safetensors" | "JSON, not an index" => None,
        // pickle.dump(tensor) hands the storage, a legacy torch.save, to
        // torch.storage._load_from_bytes: the storage is read as data, the tensor listed,
        // and the call, which runs torch.load(weights_only=False), named (TP501).
        _ if path.ends_with("tensor_pickle.pkl") => Some("TP501"),
        _ if path.ends_with("meta_tensors.pkl") => Some("TP204"),
        _ => Some("TP501"),
    }
}

#[test]
fn every_discovery_fixture_fails_with_its_rule_and_nothing_runs() {
    let truth = truth();
    // From an empty working directory, so a payload that ran would leave its marker there.
    let cwd = temp_dir("discovery-walk");
    let abs = root().join(DIR);
    let r = audit(&cwd, &[abs.to_str().unwrap()]);
    let abs_root = format!("{}/", root().display());
    let rel = |p: &str| p.strip_prefix(&abs_root).unwrap_or(p).to_owned();
    let audited: BTreeSet<String> = paths(&r, "files").iter().map(|p| rel(p)).collect();
    let expected: BTreeSet<String> = truth
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, t)| t["kind"] != "JSON, not an index")
        .map(|(p, _)| p.clone())
        .collect();
    assert_eq!(audited, expected, "every fixture is audited, each once");
    for (path, t) in truth.as_object().unwrap() {
        let Some(code) = expected_code(path, t) else {
            continue;
        };
        let f = file(&r, &format!("{abs_root}{path}"));
        let found = findings(f);
        assert!(found.iter().any(|(c, _)| c == code), "{path}: {found:?}");
        // A refused file's globals are TP501 findings too: CPython ran them before failing.
        assert!(
            found
                .iter()
                .all(|(c, _)| c == code || (code == "TP502" && c == "TP501")),
            "{path}: only {code}: {found:?}"
        );
        if code == "TP501" && t["kind"] == "torch.distributed.checkpoint directory" {
            // The payload is reported; the dataclasses pickle.load imports for .metadata are
            // DCP's own, data to tensorplay.
            let reported = unsafe_globals(f);
            assert_eq!(
                reported,
                BTreeSet::from(["posix.system".to_owned()]),
                "{path}"
            );
            assert!(!t["metadata_unsafe_globals"].as_array().unwrap().is_empty());
        } else if code == "TP501" {
            assert_eq!(unsafe_globals(f), strings(&t["unsafe_globals"]), "{path}");
        }
        // Whatever a loader ran code from fails here.
        let ran = ["torch_load", "pickle_load", "dcp_load"]
            .iter()
            .any(|l| t[l]["payload_ran"] == true);
        assert!(!ran || f["findings"][0]["severity"] == "error", "{path}");
    }
    let dcp = format!("{abs_root}{DIR}/dcp");
    let parts = &truth[format!("{DIR}/dcp")]["parts"];
    for part in parts.as_array().unwrap() {
        let part = format!("{dcp}/{}", part.as_str().unwrap());
        assert_eq!(
            skip_reason(&r, &part),
            format!("part of the torch.distributed.checkpoint directory {dcp}")
        );
    }
    assert!(
        !cwd.join("tensorplay_payload_marker").exists(),
        "a payload ran"
    );
    assert_eq!(
        std::fs::read_dir(&cwd).unwrap().count(),
        0,
        "{cwd:?} written to"
    );
    std::fs::remove_dir_all(&cwd).ok();
}

#[test]
fn what_each_fixture_is_reported_as() {
    let cases: [(&str, &str, &str); 5] = [
        (
            "model.pkl",
            "pickle",
            "<pickle> at byte 73 references builtins.exec",
        ),
        (
            "weights",
            "pytorch-zip",
            "weights/data.pkl at byte 180 references builtins.eval",
        ),
        (
            ".hidden.pt",
            "pytorch-zip",
            ".hidden/data.pkl at byte 180 references posix.system",
        ),
        (
            "model.safetensors",
            "",
            "Git LFS pointer: run `git lfs pull` to fetch the file it stands for",
        ),
        (
            "dcp",
            "torch-distributed",
            "__0_0.distcp[0..1325]/archive/data.pkl at byte 2 references posix.system",
        ),
    ];
    for (name, format, message) in cases {
        let path = format!("{DIR}/{name}");
        let r = audit(&root(), &[&path]);
        let f = file(&r, &path);
        assert_eq!(f["format"].as_str().unwrap_or(""), format, "{path}");
        let found = findings(f);
        assert!(
            found.iter().any(|(_, m)| m.contains(message)),
            "{path}: {found:?}"
        );
    }
}

#[test]
fn a_plain_pickle_lists_its_storage_less_tensors() {
    let path = format!("{DIR}/meta_tensors.pkl");
    let out = run(&["inspect", "--format", "json", &path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["format"], "pickle");
    let truth = &truth()[&path]["tensors"];
    let tensors = doc["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), truth.as_object().unwrap().len());
    for t in tensors {
        let expected = &truth[t["name"].as_str().unwrap()];
        assert_eq!(t["shape"], expected["shape"]);
        assert_eq!(t["strides"], expected["stride"]);
        assert_eq!(t["dtype"], expected["dtype"]);
        assert_eq!(t["device"], expected["device"]);
    }
    // A pickle of numpy arrays has no tensors; its globals are what is judged.
    let out = run(&[
        "inspect",
        "--format",
        "json",
        &format!("{DIR}/arrays_protocol0"),
    ]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["tensors"], serde_json::json!([]));
    assert_eq!(doc["unsafe_globals"].as_array().unwrap().len(), 3);
}

#[test]
fn a_distcp_file_alone_is_not_read_as_a_checkpoint() {
    let truth = truth();
    let part = &truth[format!("{DIR}/dcp")]["part"];
    let path = part["path"].as_str().unwrap();
    // torch itself does not load it as a checkpoint.
    assert_eq!(part["torch_load"]["loaded"], false);
    let r = audit(&root(), &[path]);
    let found = findings(file(&r, path));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "TP502");
    assert!(
        found[0].1.contains("not a checkpoint on its own"),
        "{found:?}"
    );
}

#[test]
fn symlink_loops_and_dangling_links_are_reported_not_followed_forever() {
    let dir = temp_dir("discovery-links");
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::copy(
        root().join("fixtures/pytorch/state_dict.pt"),
        tree.join("real.pt"),
    )
    .unwrap();
    let link = |target: &str, at: &str| std::os::unix::fs::symlink(target, tree.join(at)).unwrap();
    link("missing.pt", "dangling.pt");
    link("b", "a");
    link("a", "b");
    link("..", "sub/up");
    link(".", "self");
    link("real.pt", "alias.pt");
    let t = tree.to_str().unwrap();
    let r = audit(&dir, &[t]);
    let failure = |name: &str| {
        let found = findings(file(&r, &format!("{t}/{name}")));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "TP502");
        found[0].1.clone()
    };
    assert!(failure("dangling.pt").ends_with(
        "dangling.pt: symlink to missing.pt cannot be followed: its target does not exist"
    ));
    assert!(failure("a").contains("a: symlink to b cannot be followed: "));
    assert!(failure("b").contains("b: symlink to a cannot be followed: "));
    assert_eq!(
        skip_reason(&r, &format!("{t}/sub/up")),
        format!("symlink loop: leads back to {t} (symlink to ..)")
    );
    assert_eq!(
        skip_reason(&r, &format!("{t}/self")),
        format!("symlink loop: leads back to {t} (symlink to .)")
    );
    // The real file is audited once, under the link's name.
    assert!(findings(file(&r, &format!("{t}/alias.pt"))).is_empty());
    assert_eq!(
        skip_reason(&r, &format!("{t}/real.pt")),
        format!("same file as {t}/alias.pt")
    );
    assert_eq!(paths(&r, "files").len(), 4, "{r:#}");
    assert_eq!(
        run_in(&dir, &["audit", t]).status.code(),
        Some(1),
        "not passed"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_empty_directory_is_nothing_to_audit_unless_allowed() {
    let dir = temp_dir("discovery-empty");
    let d = dir.to_str().unwrap();
    let out = run(&["audit", d]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: nothing to audit: no checkpoint found in {d} (0 skipped; --allow-empty accepts this)\n"
        )
    );
    assert_eq!(
        stdout(&out),
        format!("could not judge: nothing to audit: no checkpoint found in {d} (0 skipped; --allow-empty accepts this)\n")
    );
    let out = run(&["audit", "--ci-mode", "--allow-empty", d]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(r["files"], serde_json::json!([]));
    assert_eq!(r["summary"]["passed"], true);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_directory_of_non_checkpoints_lists_every_file_as_skipped() {
    let dir = temp_dir("discovery-others");
    let files = [
        (
            "README.md",
            &b"# Model card\n\nNote: weights are elsewhere.\n"[..],
        ),
        (
            "Copyright",
            b"Copyright (c) 2024 the authors, all rights reserved\n",
        ),
        ("config.json", b"{\"model_type\": \"bert\"}\n"),
        (
            ".gitattributes",
            b"*.bin filter=lfs diff=lfs merge=lfs -text\n",
        ),
        ("docs/notes.txt", b"Introduction\nSome text\n"),
        ("docs/data.csv", b"id,name\n1,a\n"),
    ];
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    // A special file: never opened (a FIFO would block), listed as skipped.
    let _socket = std::os::unix::net::UnixListener::bind(dir.join("docs/sock")).unwrap();
    let d = dir.to_str().unwrap();
    let out = run(&["audit", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nothing to audit: no checkpoint found in "));
    assert!(stderr(&out).contains(" (7 skipped; "), "{}", stderr(&out));
    let r = audit(&root(), &["--allow-empty", d]);
    let mut expected: BTreeSet<String> = files.iter().map(|(n, _)| format!("{d}/{n}")).collect();
    expected.insert(format!("{d}/docs/sock"));
    assert_eq!(paths(&r, "skipped"), expected);
    assert_eq!(
        skip_reason(&r, &format!("{d}/docs/sock")),
        "not a regular file (a socket)"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_git_lfs_pointer_fails_without_a_checkpoint_extension() {
    let dir = temp_dir("discovery-lfs");
    let pointer = std::fs::read(root().join(DIR).join("model.safetensors")).unwrap();
    std::fs::write(dir.join("weights"), pointer).unwrap();
    let r = audit(&root(), &[dir.to_str().unwrap()]);
    let path = format!("{}/weights", dir.display());
    assert_eq!(
        findings(file(&r, &path)),
        [(
            "TP502".to_owned(),
            format!("{path}: Git LFS pointer: run `git lfs pull` to fetch the file it stands for")
        )]
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_file_named_and_walked_is_audited_once() {
    let path = format!("{DIR}/model.pkl");
    let r = audit(&root(), &[DIR, &path]);
    let named: Vec<&serde_json::Value> = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"] == path.as_str())
        .collect();
    assert_eq!(named.len(), 1);
    assert!(!paths(&r, "skipped").contains(&path));
}

/// A directory holding one file of every kind a loader accepts, each under an extension-less
/// or misleading name: every one is audited, whatever its name says; only what no loader
/// accepts is skipped, with the rule that excluded it.
#[test]
fn every_file_a_loader_accepts_is_audited_whatever_its_name() {
    let dir = crate::common::TempDir::new("discovery-every-loader");
    let tree = dir.0.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    let copy = |from: &str, to: &str| {
        std::fs::copy(root().join(from), tree.join(to)).unwrap_or_else(|e| panic!("{from}: {e}"));
        to.to_owned()
    };
    let mut audited = vec![
        copy("fixtures/safetensors/basic.safetensors", "weights"),
        copy("fixtures/numpy/float32_c.npy", "array.txt"),
        copy("fixtures/numpy/two.npz", "archive.json"),
        copy("fixtures/gguf/metadata.gguf", "model.png"),
        copy("fixtures/pytorch/state_dict.pt", "pytorch_model"),
        copy("fixtures/pytorch/torchscript.pt", "script.md"),
        copy("fixtures/pt2/tiny.pt2", "exported"),
        copy("fixtures/pytorch/legacy_state_dict.pt", "legacy.cfg"),
        copy("fixtures/hostile/legacy/tar_clean.pt", "old.txt"),
        copy("fixtures/hostile/discovery/model.pkl", "model_state"),
        copy("fixtures/hostile/discovery/arrays_protocol0", "notes"),
    ];
    // joblib: plain and every compressor joblib.load picks by magic.
    let mut joblib: Vec<_> = std::fs::read_dir(root().join("fixtures/joblib"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.contains(".joblib"))
        .collect();
    joblib.sort();
    assert!(joblib.len() >= 8, "{joblib:?}");
    for (i, name) in joblib.iter().enumerate() {
        audited.push(copy(
            &format!("fixtures/joblib/{name}"),
            &format!("sk_{i}.log"),
        ));
    }
    // A pickle whose first operand is longer than any window.
    let mut long = vec![b'X'];
    long.extend(600u32.to_le_bytes());
    long.extend([b'a'; 600]);
    long.extend(b"0(dp0\nVa\np1\nI1\ns.");
    std::fs::write(tree.join("model_state.bak"), long).unwrap();
    audited.push("model_state.bak".into());
    // A torch.distributed.checkpoint directory under a plain name: one checkpoint.
    std::fs::create_dir_all(tree.join("ckpt")).unwrap();
    for f in [".metadata", "__0_0.distcp"] {
        copy(&format!("fixtures/dcp/plain/{f}"), &format!("ckpt/{f}"));
    }
    audited.push("ckpt".into());

    let not_checkpoints = [
        ("README", &b"Some text about the model.\n"[..], "no-loader"),
        ("config.json", &b"{\"hidden_size\": 8}"[..], "not-an-index"),
        // A gzip stream of text: joblib.load inflates it and fails to unpickle, running nothing.
        (
            "data.gz",
            &b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x0b\xc9\xc8\x2c\x56\x00\xa2\x44\x85\x92\xd4\x8a\x12\x00\xf9\x46\x8e\x23\x0e\x00\x00\x00"[..],
            "no-loader",
        ),
        ("empty", &b""[..], "no-loader"),
    ];
    for (name, bytes, _) in &not_checkpoints {
        std::fs::write(tree.join(name), bytes).unwrap();
    }

    let t = tree.to_str().unwrap();
    // Absolute paths: run from the repository; its report is larger than a pipe holds, so
    // read as it is written (`run_in` waits first).
    let out = crate::common::tensorplay(&["audit", "--ci-mode", "--fail-on", "never", t]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON report");
    let files = paths(&report, "files");
    for name in &audited {
        assert!(
            files.contains(&format!("{t}/{name}")),
            "{name} not audited: {report:#}"
        );
    }
    assert_eq!(files.len(), audited.len(), "{files:#?}");
    for (name, _, rule) in not_checkpoints {
        let skipped = report["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["path"] == format!("{t}/{name}"))
            .unwrap_or_else(|| panic!("{name} is not skipped: {report:#}"));
        assert_eq!(skipped["rule"], rule, "{skipped}");
    }
    // Each is read as what it is, not refused for its name (an old tar archive is audited and
    // refused whatever its name: tensorplay reads its pickles only).
    let tar = format!("{t}/old.txt");
    for f in report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["path"] != tar)
    {
        let codes: Vec<_> = findings(f)
            .into_iter()
            .map(|(code, m)| format!("{code} {m}"))
            .collect();
        assert!(
            !codes.iter().any(|c| c.starts_with("TP502")),
            "{}: {codes:?}",
            f["path"]
        );
    }
}
