//! Memory under hostile input: files that claim far more than they hold, or hold very many
//! members, stay under the memory budget, with a clean finding, TP502 (damaged) or TP506
//! (over the budget), or read correctly.
//! Each audit runs as a child process whose peak resident memory (its `--verbose` note) is
//! printed; the bound asserted is generous (1.5 × the
//! budget): memory, never time.
//!
//! The 2^62-element claims are committed (`fixtures/hostile/budget/`, made by
//! `make_budget.py` with the real libraries' verdicts); the 300 000-member archive is built
//! here, in a temp folder, as no fixture should weigh that much.

use crate::common::zip_writer::ZipWriter;
use crate::common::{error_findings, peak_rss, read_json, root, TempDir};
use std::path::Path;
use std::process::Command;

const BUDGET: u64 = 64 << 20;
const TRUTH: &str = "fixtures/hostile/budget/truth.json";

/// One audit's verdict: exit code, each file's error findings (code, message), and the peak
/// resident memory of the process in bytes.
struct Run {
    code: Option<i32>,
    errors: Vec<Vec<(String, String)>>,
    peak_rss: u64,
}

/// Runs `tensorplay audit --ci-mode --verbose --max-memory <budget> <path>`.
fn audit(path: &Path, budget: u64) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
        .args([
            "audit",
            "--ci-mode",
            "--verbose",
            "--max-memory",
            &budget.to_string(),
        ])
        .arg(path)
        .current_dir(root())
        .output()
        .expect("tensorplay runs");
    let peak_rss = peak_rss(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let errors = error_findings(&report);
    Run {
        code: out.status.code(),
        errors,
        peak_rss,
    }
}

/// What the process takes besides the budget: the program, its threads' stacks and their
/// allocator heaps (each file is audited on a thread of its own, for its time limit).
const PROGRAM: u64 = 8 << 20;

/// Prints the peak and holds it under 1.5 × the budget and the program.
fn within_budget(what: &str, run: &Run, budget: u64) {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let peak = run.peak_rss;
    println!(
        "{what}: peak RSS {:.1} MiB (budget {:.0} MiB), exit {:?}",
        mib(peak),
        mib(budget),
        run.code
    );
    assert!(
        peak < budget + budget / 2 + PROGRAM,
        "{what}: peak RSS {peak} bytes against a {budget}-byte budget"
    );
}

/// The message of the one finding of a run that failed with TP506 alone.
fn only_over_budget(run: &Run) -> &str {
    assert_eq!(run.code, Some(1));
    let [errors] = run.errors.as_slice() else {
        panic!("{:?}", run.errors)
    };
    let [(code, message)] = errors.as_slice() else {
        panic!("{errors:?}")
    };
    assert_eq!(code, "TP506");
    message
}

#[test]
fn claims_of_2_to_the_62_elements_are_refused_without_allocating_them() {
    let truth = read_json(TRUTH);
    // The real libraries refuse each one too.
    for (file, key) in [
        ("claim_2e62.safetensors", "safe_open_get_tensor"),
        ("claim_shape_2e62.pt", "torch_load_weights_only"),
        ("claim_storage_2e62.pt", "torch_load_weights_only"),
    ] {
        let verdict = truth[file][key].as_str().expect("verdict");
        assert!(verdict.starts_with("refused: "), "{file}: {verdict}");
    }
    let cases = [
        (
            "claim_2e62.safetensors",
            "TP502",
            "tensor 'claim': element count × dtype width overflows",
        ),
        (
            "claim_shape_2e62.pt",
            "TP107",
            "'claim': view byte extent overflows 64-bit arithmetic",
        ),
        (
            "claim_storage_2e62.pt",
            "TP502",
            "archive/data.pkl at byte 174: storage '0': size overflows",
        ),
    ];
    for (file, rule, detail) in cases {
        let path = format!("fixtures/hostile/budget/{file}");
        let run = audit(Path::new(&path), BUDGET);
        assert_eq!(run.code, Some(1), "{file}");
        let [errors] = run.errors.as_slice() else {
            panic!("{file}: {:?}", run.errors)
        };
        let [(code, message)] = errors.as_slice() else {
            panic!("{file}: {errors:?}")
        };
        assert_eq!(code, rule, "{file}: {message}");
        assert!(message.ends_with(detail), "{file}: {message}");
        within_budget(file, &run, BUDGET);
    }
}

/// 64 MiB of zeros in a 66 KB deflated record: checked and scanned one 1 MiB piece at a
/// time, it passes under a budget a quarter of its size.
#[test]
fn an_inflate_bomb_streams_within_the_budget() {
    let budget = 16 << 20;
    let run = audit(Path::new("fixtures/hostile/budget/inflate_bomb.pt"), budget);
    assert_eq!(run.code, Some(0));
    assert_eq!(run.errors, [Vec::<(String, String)>::new()]);
    within_budget("inflate bomb (64 MiB deflated)", &run, budget);
}

/// `torch.save({"w": tensor([1.0, nan, 2.0, 3.0])})`'s data.pkl, written out opcode by
/// opcode (protocol 2): `_rebuild_tensor_v2` over storage '0' (4 float32 on the CPU).
fn state_dict_pickle() -> Vec<u8> {
    let mut p = b"\x80\x02}q\x00X\x01\x00\x00\x00w".to_vec();
    p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n(");
    p.extend(b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\n");
    p.extend(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ");
    p.extend(b"K\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRs.");
    p
}

/// A torch-style archive of one float32 tensor holding a NaN, and `extra` more members.
fn many_members(extra: u32) -> Vec<u8> {
    let mut zip = ZipWriter::default();
    zip.add("archive/data.pkl", &state_dict_pickle());
    zip.add("archive/byteorder", b"little");
    let values: Vec<u8> = [1.0f32, f32::NAN, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    zip.add("archive/data/0", &values);
    for i in 0..extra {
        zip.add(&format!("archive/extra/{i:06}"), b"x");
    }
    zip.add("archive/version", b"3\n");
    zip.finish()
}

#[test]
fn a_300_000_member_archive_reads_within_the_budget_or_is_refused_cleanly() {
    let dir = TempDir::new("hostile-members");
    // The same archive with a few members first: the tensor and its NaN are found.
    let small = dir.0.join("small.pt");
    std::fs::write(&small, many_members(3)).expect("archive");
    let run = audit(&small, BUDGET);
    assert_eq!(run.code, Some(1));
    let codes: Vec<&str> = run.errors[0].iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(codes, ["TP401"], "{:?}", run.errors);

    let path = dir.0.join("members.pt");
    std::fs::write(&path, many_members(300_000)).expect("archive");
    let shown = path.display().to_string();
    // At the default-sized budgets the members are read and the tensor scanned.
    for budget in [256 << 20, 1 << 30] {
        let run = audit(&path, budget);
        assert_eq!(run.code, Some(1));
        let codes: Vec<&str> = run.errors[0].iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(codes, ["TP401"], "{:?}", run.errors);
        within_budget("300 000 members", &run, budget);
    }
    // Under a budget smaller than their directory, a clean refusal naming it.
    let run = audit(&path, BUDGET);
    let message = only_over_budget(&run);
    assert!(
        message.starts_with(&format!(
            "{shown}: exceeds the memory budget (--max-memory): the read would hold "
        )),
        "{message}"
    );
    assert!(
        message.ends_with(
            ", more than the 64.0 MiB (67108864 bytes) allowed, for the central directory's \
             300004 entries"
        ),
        "{message}"
    );
    within_budget("300 000 members, small budget", &run, BUDGET);
}

/// torch.load's weights-only reading, replayed on every pickle it would open, holds each
/// value as a kind (64 bytes) where the pickle machine holds an id (4 bytes) or a node: a
/// stream of millions of values grows it far past what the stream weighs, and past the
/// budget where the machine stays within it. It is held to the budget. An archive's replay
/// past it leaves torch.load's verdict unknown: TP506 naming the replay, beside the globals
/// the machine found. A plain pickle's leaves only torch's message unknown (it refuses every
/// plain pickle): the file is read on.
#[test]
fn the_weights_only_replay_stays_within_the_budget() {
    let dir = TempDir::new("hostile-replay");
    let stream = |value: &[u8], n: usize, tail: &[u8]| {
        let mut stream = b"\x80\x02".to_vec();
        stream.extend(std::iter::repeat_n(value, n).flatten());
        stream.extend(tail);
        stream.push(b'.');
        stream
    };
    let archive = |name: &str, pickle: &[u8]| {
        let mut zip = ZipWriter::default();
        zip.add("archive/data.pkl", pickle);
        zip.add("archive/byteorder", b"little");
        zip.add("archive/version", b"3\n");
        let path = dir.0.join(name);
        std::fs::write(&path, zip.finish()).expect("archive");
        path
    };
    let lists = archive("lists.pt", &stream(b"]", 1_000_000, b""));
    let global = archive("global.pt", &stream(b"]", 1_000_000, b"cos\nsystem\n"));
    for (path, codes) in [(&lists, &["TP506"][..]), (&global, &["TP501", "TP506"])] {
        let run = audit(path, BUDGET);
        let shown = path.display();
        assert_eq!(run.code, Some(1), "{shown}");
        let found: Vec<&str> = run.errors[0].iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(found, codes, "{shown}: {:?}", run.errors);
        let (_, message) = run.errors[0]
            .iter()
            .find(|(c, _)| c == "TP506")
            .expect("TP506");
        assert!(
            message.contains(
                "allowed, for the weights-only reading torch.load gives archive/data.pkl (at byte "
            ),
            "{message}"
        );
        within_budget(&format!("{shown}"), &run, BUDGET);
    }
    // 3 900 000 Nones: one shared value to the machine, its stack 16 MB.
    let plain = dir.0.join("nones.pkl");
    std::fs::write(&plain, stream(b"N", 3_900_000, b"")).expect("pickle");
    let run = audit(&plain, BUDGET);
    assert_eq!(run.code, Some(0), "{:?}", run.errors);
    within_budget("3 900 000 Nones", &run, BUDGET);
}

/// The pickle machine's memo and marks are charged as allocated: memo keys a thousand apart
/// (each leaving a thousand empty slots: this 2 MB stream once took 2.9 GB) and 4 200 000 open
/// MARKs (once refused by a fixed limit of 4 000 000 whatever the budget) are refused at the
/// budget, with the flag that raises it.
#[test]
fn memo_gaps_and_marks_are_held_to_the_budget() {
    let dir = TempDir::new("hostile-memo");
    let mut gaps = b"\x80\x02N".to_vec();
    for i in 1..=400_000u32 {
        gaps.push(b'r');
        gaps.extend((i * 1023).to_le_bytes());
    }
    gaps.push(b'.');
    let mut marks = b"\x80\x02".to_vec();
    marks.extend(std::iter::repeat_n(b'(', 4_200_000));
    marks.extend(b"N.");
    for (name, stream) in [("gaps.pkl", gaps), ("marks.pkl", marks)] {
        let path = dir.0.join(name);
        std::fs::write(&path, stream).expect("pickle");
        let run = audit(&path, BUDGET);
        let message = only_over_budget(&run);
        assert!(
            message.contains("exceeds the memory budget (--max-memory)")
                && message.contains("for the values pickle <pickle> builds"),
            "{name}: {message}"
        );
        within_budget(name, &run, BUDGET);
    }
}

/// The walk of a stream's values for tensors has fixed limits (nesting, values visited): a
/// stream past one is not judged (TP506), where it once read as corrupt (TP502).
#[test]
fn a_walk_past_a_fixed_limit_is_not_judged() {
    let dir = TempDir::new("hostile-walk");
    // 300 lists, each inside the one before.
    let mut nested = b"\x80\x02".to_vec();
    nested.extend(std::iter::repeat_n(b']', 300));
    nested.extend(std::iter::repeat_n(b'a', 299));
    nested.push(b'.');
    // 5 000 references to one list of 5 000 references to one empty list: 25 million values
    // to visit, from 20 KB.
    let mut wide = b"\x80\x02]q\x000]q\x01(".to_vec();
    wide.extend(b"h\x00".repeat(5_000));
    wide.extend(b"e0](");
    wide.extend(b"h\x01".repeat(5_000));
    wide.extend(b"e.");
    for (name, stream, what) in [
        (
            "nested.pkl",
            nested,
            "at byte 602: objects nested deeper than 256",
        ),
        (
            "wide.pkl",
            wide,
            "at byte 20016: object graph has more than 20000000 values to walk",
        ),
    ] {
        let path = dir.0.join(name);
        std::fs::write(&path, stream).expect("pickle");
        let run = audit(&path, BUDGET);
        let message = only_over_budget(&run);
        assert!(
            message.ends_with(&format!(
                "<pickle> {what}, a fixed limit of tensorplay's pickle reader"
            )),
            "{name}: {message}"
        );
        within_budget(name, &run, BUDGET);
    }
}
