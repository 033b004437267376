//! Retried jobs: Kubernetes and AWS Batch rerun a failed index, so the same inputs and K/N
//! must write the same part byte for byte; `merge` takes such a copy once and refuses two
//! different parts for one index.

use crate::common::{stderr, tensorplay};
use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensorplay-retry-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

fn part(k: usize, out: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let json = out.join(name);
    let share = format!("{k}/2");
    let mut args = vec!["audit", "--color", "never", "--partition", &share];
    args.extend(extra);
    args.extend(["--json", s(&json), "fixtures/pytorch"]);
    let run = tensorplay(&args);
    assert!(
        run.status.code().is_some_and(|c| c <= 1),
        "{}",
        stderr(&run)
    );
    json
}

#[test]
fn a_retried_part_is_byte_identical_and_merges_once() {
    let out = scratch("same");
    let first = part(1, &out, "first.json", &[]);
    let retry = part(1, &out, "retry.json", &[]);
    let second = part(2, &out, "second.json", &[]);
    assert_eq!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&retry).unwrap(),
        "a retried part differs from the first attempt"
    );
    let merge = |parts: &[&Path], json: &Path| {
        let mut args = vec!["merge", "--color", "never", "--json", s(json)];
        args.extend(parts.iter().map(|p| s(p)));
        tensorplay(&args)
    };
    let (once, twice) = (out.join("once.json"), out.join("twice.json"));
    let a = merge(&[&first, &second], &once);
    let b = merge(&[&first, &retry, &second], &twice);
    assert!(a.status.code().is_some_and(|c| c <= 1), "{}", stderr(&a));
    assert_eq!(a.status.code(), b.status.code(), "{}", stderr(&b));
    assert_eq!(
        std::fs::read(&once).unwrap(),
        std::fs::read(&twice).unwrap(),
        "a part given twice changed the merge"
    );
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn two_different_parts_for_one_index_are_refused() {
    let out = scratch("different");
    let first = part(1, &out, "first.json", &[]);
    // The "retry" judged with other rules: another audit of the same index.
    let other = part(1, &out, "other.json", &["--ignore", "TP501"]);
    let second = part(2, &out, "second.json", &[]);
    assert_ne!(
        std::fs::read(&first).unwrap(),
        std::fs::read(&other).unwrap()
    );
    let run = tensorplay(&["merge", s(&first), s(&other), s(&second)]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(
        stderr(&run).contains("part 1/2 given twice with different content"),
        "{}",
        stderr(&run)
    );
    std::fs::remove_dir_all(&out).ok();
}
