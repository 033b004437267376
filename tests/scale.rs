//! Per-tensor metadata is charged to the memory budget (`--max-memory`): a safetensors file
//! declaring a million tensors (generated here, 87 MB, never committed) is refused TP506
//! under a small budget before its tensors are built, and read whole under the default
//! budget. The peak RSS of each run is recorded (its own `VmHWM`) and bounded generously.

use crate::common::peak_rss;
use std::path::{Path, PathBuf};
use std::process::Command;

const TENSORS: usize = 1_000_000;

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `n` one-element float32 tensors, as a state dict's names.
fn many_tensors(n: usize) -> TempFile {
    let mut header = String::from(r#"{"__metadata__":{"format":"pt"}"#);
    for i in 0..n {
        header.push_str(&format!(
            r#","blocks.{i}.weight":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}}"#,
            4 * i,
            4 * i + 4
        ));
    }
    header.push('}');
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + 4 * n, 0);
    let path = std::env::temp_dir().join(format!(
        "tensorplay-scale-{}-{n}.safetensors",
        std::process::id()
    ));
    std::fs::write(&path, bytes).expect("write the generated file");
    TempFile(path)
}

/// Runs an audit and returns its JSON report and the peak RSS (bytes) it notes.
fn audit(file: &Path, max_memory: Option<&str>) -> (serde_json::Value, u64) {
    let mut args = vec!["audit", "--ci-mode", "--metadata-only", "--verbose"];
    if let Some(max) = max_memory {
        args.extend(["--max-memory", max]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args(args)
        .arg(file)
        .env_remove("GITHUB_ACTIONS")
        .output()
        .expect("tensorplay runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {}", &text[..text.len().min(500)]));
    let peak = peak_rss(&out);
    eprintln!(
        "peak RSS under --max-memory {}: {} MiB",
        max_memory.unwrap_or("(default)"),
        peak >> 20
    );
    (report, peak)
}

#[test]
#[cfg(target_os = "linux")]
fn a_million_tensors_are_charged_to_the_budget() {
    let file = many_tensors(TENSORS);

    let (report, small_peak) = audit(&file.0, Some("64MiB"));
    let findings = &report["files"][0]["findings"];
    assert_eq!(findings[0]["code"], "TP506", "{report}");
    let message = findings[0]["message"].as_str().expect("message");
    assert!(
        message.contains("exceeds the memory budget (--max-memory)")
            && message.contains("more than the 64.0 MiB (67108864 bytes) allowed"),
        "{message}"
    );
    assert_eq!(report["files"][0]["tensors"], 0);
    // The header is mapped (87 MB); refused entries are never built.
    assert!(small_peak < 400 << 20, "{} MiB", small_peak >> 20);

    let (report, peak) = audit(&file.0, None);
    assert_eq!(report["files"][0]["tensors"], TENSORS, "{report}");
    assert_eq!(report["summary"]["errors"], 0, "{report}");
    // What the budget admits, plus the mapped file and the audit's own structures.
    assert!(peak < 3 << 29, "{} MiB", peak >> 20);
}
