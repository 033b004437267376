//! Helpers shared by the integration tests.

#[cfg(target_os = "linux")]
pub mod hostile_hub;
#[cfg(target_os = "linux")]
pub mod hostile_store;
#[cfg(target_os = "linux")]
pub mod range_server;
#[cfg(target_os = "linux")]
pub mod request;
pub mod zip_writer;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root, where fixture paths in truth files are relative to.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Runs the tensorplay binary from the repository root, outside GitHub Actions even when the
/// tests run there (inside, the human output would gain annotations).
pub fn tensorplay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(args)
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("tensorplay runs")
}

/// Reads a JSON file under the repository root.
pub fn read_json(relative: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("{relative}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Every `*.truth.json` of a good fixture (outside `bad/`), relative to the root, sorted.
pub fn good_truth_files() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("fixture folder") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                if path.file_name() != Some("bad".as_ref()) {
                    walk(&path, out);
                }
            } else if path.to_string_lossy().ends_with(".truth.json") {
                out.push(path);
            }
        }
    }
    let root = root();
    let mut found = Vec::new();
    walk(&root.join("fixtures"), &mut found);
    let mut found: Vec<String> = found
        .iter()
        .map(|p| {
            p.strip_prefix(&root)
                .expect("under root")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    found.sort();
    found
}

/// Text of stdout / stderr.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Text of stderr.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Copies a fixture folder, recursively, to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// A temporary folder for one test, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tensorplay-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// The peak resident memory a `--verbose` audit notes on stderr, in bytes. The run's own
/// `VmHWM`: a child's `ru_maxrss` would carry the high-water mark of the large test process
/// that spawned it.
pub fn peak_rss(out: &Output) -> u64 {
    let text = stderr(out);
    let mib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("note: peak resident memory "))
        .and_then(|rest| rest.strip_suffix(" MiB"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no peak memory note: {text}"));
    mib << 20
}

/// A `tensorplay.toml` in a temporary folder, removed when dropped.
pub struct TempConfig {
    _dir: TempDir,
    path: PathBuf,
}

impl TempConfig {
    pub fn new(name: &str, text: &str) -> TempConfig {
        let dir = TempDir::new(&format!("config-{name}"));
        let path = dir.0.join("tensorplay.toml");
        std::fs::write(&path, text).expect("config");
        TempConfig { _dir: dir, path }
    }

    pub fn path(&self) -> &str {
        self.path.to_str().expect("utf-8 path")
    }
}

/// The SHA-256 (hex) of the bytes `tensor` views, as truth files record a library's reading.
pub fn view_sha256(tensor: &tensorplay_engine::Tensor) -> String {
    use sha2::{Digest, Sha256};
    let bytes = tensor.tensor_impl().view_bytes().expect("host bytes");
    format!("{:x}", Sha256::digest(bytes))
}

/// Each TP501 of a report's first file as (member, `module.name`): its message says where
/// (`<member> at byte N`) and what (`references <global>:`).
pub fn unsafe_globals(report: &serde_json::Value) -> Vec<(String, String)> {
    report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["code"] == "TP501")
        .map(|f| {
            let message = f["message"].as_str().expect("message");
            let (member, rest) = message.split_once(" at byte ").expect("member");
            let global = rest
                .split_once(" references ")
                .and_then(|(_, g)| g.split_once(':'))
                .map(|(g, _)| g)
                .expect("global");
            (member.to_owned(), global.to_owned())
        })
        .collect()
}

/// Each file's error findings in a JSON report, as (code, message).
pub fn error_findings(report: &serde_json::Value) -> Vec<Vec<(String, String)>> {
    report["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|file| {
            file["findings"]
                .as_array()
                .expect("findings")
                .iter()
                .filter(|f| f["severity"] == "error")
                .map(|f| {
                    let text = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
                    (text("code"), text("message"))
                })
                .collect()
        })
        .collect()
}

/// `module.name` of each global in a JSON list of them (`unsafe_globals`).
pub fn global_names(globals: &serde_json::Value) -> Vec<String> {
    globals
        .as_array()
        .expect("globals")
        .iter()
        .map(|g| {
            let part = |k: &str| g[k].as_str().expect("module and name").to_owned();
            format!("{}.{}", part("module"), part("name"))
        })
        .collect()
}

/// An `inspect --format json` document without its `weights_only` verdict, which is checked
/// here against torch's own answer for the file (`fixtures/weights_only.json`): library
/// truths record what each file holds, torch's answer whether its default loader loads it.
pub fn checked_weights_only(mut doc: serde_json::Value, path: &str) -> serde_json::Value {
    if let Some(verdict) = doc.as_object_mut().and_then(|d| d.remove("weights_only")) {
        let torch = &read_json("fixtures/weights_only.json")[path];
        assert_eq!(
            verdict["loads"], torch["loads"],
            "{path}: torch says {torch}"
        );
    }
    doc
}

/// `inspect --format json PATH` equals the truth's `inspect` (a library's own reading, in the
/// layout of `fixtures/models/truth.json`), with the weights-only verdict torch's, and the
/// bytes behind each tensor (`bytes_sha256`) or storage (`storage_sha256`; inflated, for
/// deflated archives) hash as the library read them.
pub fn matches_inspect_truth(path: &str, truth: &serde_json::Value, truth_file: &str) {
    let out = tensorplay(&["inspect", "--format", "json", path]);
    assert_eq!(out.status.code(), Some(0), "{path}: {}", stderr(&out));
    let got: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("valid JSON");
    let got = checked_weights_only(got, path);
    assert_eq!(got, truth["inspect"], "{path} differs from {truth_file}");

    let ckpt = tensorplay_engine::load::open(&root().join(path)).expect(path);
    assert_bytes_as_truth(path, &ckpt, truth);
}

/// The bytes behind each tensor (`bytes_sha256`) or storage (`storage_sha256`, by key; a
/// sharded set's as `shard:key`, keys repeating across shards) hash as the truth says.
pub fn assert_bytes_as_truth(
    path: &str,
    ckpt: &tensorplay_engine::Checkpoint,
    truth: &serde_json::Value,
) {
    use sha2::{Digest, Sha256};
    use tensorplay_engine::{Format, Owner};

    let sha = |bytes: &[u8]| format!("{:x}", Sha256::digest(bytes));
    if let Some(expected) = truth["bytes_sha256"].as_object() {
        assert_eq!(ckpt.tensors.len(), expected.len(), "{path}");
        for tensor in &ckpt.tensors {
            let bytes = tensor.tensor_impl().view_bytes().expect("host bytes");
            assert_eq!(
                Some(sha(bytes).as_str()),
                expected[tensor.name()].as_str(),
                "{path}: {}",
                tensor.name()
            );
        }
        return;
    }
    let expected = truth["storage_sha256"].as_object().expect("storage_sha256");
    let key_of = |s: &tensorplay_engine::Storage| match (ckpt.format, s.data_ptr().owner()) {
        (Format::PytorchIndex, Owner::Host { buffer, .. }) => {
            let shard = buffer
                .source()
                .file_name()
                .expect("shard file")
                .to_string_lossy();
            format!("{shard}:{}", s.key())
        }
        _ => s.key().to_owned(),
    };
    // Meta storages hold no bytes, and the truth none for them.
    let with_bytes: Vec<_> = ckpt
        .storages
        .iter()
        .filter_map(|s| Some((key_of(s), s.data_ptr().bytes()?)))
        .collect();
    assert_eq!(with_bytes.len(), expected.len(), "{path}");
    for (key, bytes) in with_bytes {
        assert_eq!(
            Some(sha(bytes).as_str()),
            expected.get(&key).and_then(|v| v.as_str()),
            "{path}: storage {key}"
        );
    }
}

/// A truth file's `shape`: its dimensions.
pub fn shape_of(shape: &serde_json::Value) -> Vec<u64> {
    shape
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim"))
        .collect()
}

/// A JSON array of strings.
pub fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

/// `audit --format json ARGS`: exit code and report.
pub fn audit_report(args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut all = vec!["audit", "--format", "json"];
    all.extend_from_slice(args);
    let out = tensorplay(&all);
    let report = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stderr(&out)));
    (out.status.code(), report)
}

/// (path, code, severity, tensors) of every finding of a report.
pub fn report_findings(report: &serde_json::Value) -> Vec<(String, String, String, Vec<String>)> {
    let mut all = Vec::new();
    for file in report["files"].as_array().expect("files") {
        for f in file["findings"].as_array().expect("findings") {
            all.push((
                file["path"].as_str().expect("path").to_owned(),
                f["code"].as_str().expect("code").to_owned(),
                f["severity"].as_str().expect("severity").to_owned(),
                strings(&f["tensors"]),
            ));
        }
    }
    all
}

/// A truth file keyed by fixture path (fixtures/models/, fixtures/producers/).
pub fn truth_by_path(truth_file: &str) -> serde_json::Map<String, serde_json::Value> {
    read_json(truth_file)
        .as_object()
        .expect("truth by path")
        .clone()
}

/// `tensorplay inspect --format json PATH` (a file, index or directory), which must succeed.
pub fn inspect_json(path: &str) -> serde_json::Value {
    let out = tensorplay(&["inspect", "--format", "json", path]);
    assert_eq!(out.status.code(), Some(0), "{path}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("inspect JSON")
}

/// `tensorplay audit --format json --fail-on never PATH`: the report, whatever it finds.
pub fn audit_json(path: &str) -> serde_json::Value {
    audit_json_with(&[], path)
}

/// [`audit_json`] with more options (`--config FILE`) before the path.
pub fn audit_json_with(options: &[&str], path: &str) -> serde_json::Value {
    let mut args = vec!["audit", "--format", "json", "--fail-on", "never"];
    args.extend_from_slice(options);
    args.push(path);
    let out = tensorplay(&args);
    assert_eq!(out.status.code(), Some(0), "{path}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("audit JSON")
}

/// The error reading `path` (relative to the root) gives, which must be a corrupt file's whose
/// message, after the file's full path, begins with `says`.
pub fn corrupt_refusal(path: &str, says: &str) -> tensorplay_engine::Error {
    let e = tensorplay_engine::load::open(&root().join(path)).expect_err(path);
    assert_eq!(
        e.kind(),
        tensorplay_engine::ErrorKind::Corrupt,
        "{path}: {e}"
    );
    let message = e.to_string();
    assert!(
        message.starts_with(&format!("{}: {says}", root().join(path).display())),
        "{path}: {message}"
    );
    e
}
