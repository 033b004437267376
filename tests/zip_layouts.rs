//! Zip layouts that readers resolve differently (`fixtures/hostile/zip/`, made by
//! `fixtures/hostile/make_zip.py` from torch.save output). For each, the truth records which
//! `data.pkl` PyTorch 2.9.1 read and whether its payload ran; tensorplay either reads that same
//! `data.pkl` or refuses the archive as ambiguous (TP502), and wherever torch ran the payload,
//! `tensorplay audit` fails naming TP501 or TP502 and runs nothing.

use crate::common::{read_json, root, stderr, stdout};
use std::process::Command;
use tensorplay_engine::ErrorKind;

/// What tensorplay makes of a layout.
enum Verdict {
    /// Reads the archive, with this `data.pkl` ("clean" or "evil").
    Reads(&'static str),
    /// Refuses it with this message (after "<path>: ").
    Refuses(&'static str),
    /// Reads it as the plain pickle it begins with, naming these globals: what follows the
    /// pickle's STOP is no pickle CPython would run, nor a zip any loader of the file opens.
    Pickle(&'static [&'static str]),
}
use Verdict::{Pickle, Reads, Refuses};

/// Every layout, tensorplay's verdict on it and the codes `tensorplay audit` fails with.
const LAYOUTS: &[(&str, Verdict, &[&str])] = &[
    ("clean.pt", Reads("clean"), &[]),
    // An ambiguous archive is refused naming the globals of every pickle any reading finds.
    (
        "duplicate_clean_first.pt",
        Refuses("ambiguous archive: two entries are named 'archive/data.pkl' (central directory entries 0 and 7); its pickles also reference unsafe globals: posix.system (archive/data.pkl at byte 175)"),
        &["TP501", "TP502"],
    ),
    (
        "duplicate_evil_first.pt",
        Refuses("ambiguous archive: two entries are named 'archive/data.pkl' (central directory entries 0 and 7); its pickles also reference unsafe globals: posix.system (archive/data.pkl at byte 175)"),
        &["TP501", "TP502"],
    ),
    (
        "duplicate_case.pt",
        Refuses("ambiguous archive: entries 'archive/data.pkl' and 'archive/DATA.PKL' differ only in case, and PyTorch's reader matches names ignoring case (central directory entries 0 and 7); its pickles also reference unsafe globals: posix.system (archive/DATA.PKL at byte 175)"),
        &["TP501", "TP502"],
    ),
    (
        // torch.load takes it for a legacy file (it does not begin with a local header) and
        // unpickles the payload in front, as pickle.load and np.load do; tensorplay reads the
        // same first bytes as a pickle and names the payload (TP501). The archive after it
        // begins with PERSID, which CPython refuses unrun, and no loader of the file opens it.
        "prepended_pickle.pt",
        Pickle(&["posix.system"]),
        &["TP501"],
    ),
    (
        "prepended_entry.pt",
        Refuses("ambiguous archive: a local entry 'archive/data.pkl' that the central directory does not list lies between the start of the file and entry 'archive/data.pkl' (offset 0); its pickles also reference unsafe globals: posix.system (archive/data.pkl at byte 175)"),
        &["TP501", "TP502"],
    ),
    (
        "cd_offset_elsewhere.pt",
        Refuses("ambiguous archive: the end record puts the central directory at offset 1656 (463 bytes, ending at 2119), but the end records begin at offset 2582; its pickles also reference unsafe globals: posix.system (archive/data.pkl at byte 175)"),
        &["TP501", "TP502"],
    ),
    (
        "eocd_in_comment.pt",
        Refuses("ambiguous archive: two end records could end the archive, at offsets 1619 and 2468 (the second inside the first one's comment); its pickles also reference unsafe globals: posix.system (archive/data.pkl at byte 175)"),
        &["TP501", "TP502"],
    ),
    (
        "local_name_mismatch.pt",
        Refuses("ambiguous archive: entry 'archive/data.pkl': its local header at offset 1080 names it 'archive/notes.txt'; its pickles also reference unsafe globals: posix.system (archive/data.pkl at byte 175)"),
        &["TP501", "TP502"],
    ),
    ("extra_pkl.pt", Reads("clean"), &["TP501"]),
];

const DIR: &str = "fixtures/hostile/zip";

fn truth() -> serde_json::Value {
    read_json(&format!("{DIR}/truth.json"))
}

/// The unsafe globals (module.name in member) that each data.pkl carries.
fn data_pkl_globals(which: &str) -> Vec<String> {
    match which {
        "evil" => vec!["posix.system in archive/data.pkl".to_owned()],
        _ => Vec::new(),
    }
}

#[test]
fn every_layout_in_the_truth_has_a_verdict_here() {
    let truth = truth();
    let mut recorded: Vec<&str> = truth["fixtures"]
        .as_object()
        .expect("fixtures")
        .keys()
        .map(String::as_str)
        .collect();
    recorded.sort_unstable();
    let mut listed: Vec<String> = LAYOUTS
        .iter()
        .map(|(f, _, _)| format!("{DIR}/{f}"))
        .collect();
    listed.sort();
    assert_eq!(recorded, listed);
}

/// tensorplay reads the data.pkl torch read, or refuses the archive as ambiguous.
#[test]
fn tensorplay_reads_the_data_pkl_torch_reads_or_refuses() {
    let truth = truth();
    for (file, verdict, _) in LAYOUTS {
        let path = format!("{DIR}/{file}");
        let torch = &truth["fixtures"][&path];
        let full = root().join(&path);
        let read = tensorplay_engine::load::open(&full);
        match verdict {
            Reads(which) => {
                let ckpt = read.unwrap_or_else(|e| panic!("{path}: {e}"));
                assert_eq!(torch["torch_load"]["data_pkl"], *which, "{path}");
                assert_eq!(torch["torch_load"]["loads"], true, "{path}");
                assert_eq!(
                    torch["torch_load_weights_only"]["data_pkl"], *which,
                    "{path}"
                );
                // Both pickles hold w = ones(2) over storage data/0; torch loaded it.
                let tensors: Vec<(String, Vec<u64>, String)> = ckpt
                    .tensors
                    .iter()
                    .map(|t| {
                        let imp = t.tensor_impl();
                        (
                            t.name().to_owned(),
                            imp.layout().sizes().to_vec(),
                            imp.dtype().name().to_owned(),
                        )
                    })
                    .collect();
                assert_eq!(tensors, [("w".to_owned(), vec![2], "float32".to_owned())]);
                let from_data_pkl: Vec<String> = ckpt
                    .unsafe_globals
                    .iter()
                    .filter(|g| g.member == "archive/data.pkl")
                    .map(|g| format!("{}.{} in {}", g.module, g.name, g.member))
                    .collect();
                assert_eq!(from_data_pkl, data_pkl_globals(which), "{path}");
            }
            Pickle(globals) => {
                let ckpt = read.unwrap_or_else(|e| panic!("{path}: {e}"));
                assert_eq!(ckpt.format, tensorplay_engine::Format::Pickle, "{path}");
                assert_eq!(torch["torch_load"]["payload_ran"], true, "{path}");
                let named: Vec<String> = ckpt
                    .unsafe_globals
                    .iter()
                    .map(|g| format!("{}.{}", g.module, g.name))
                    .collect();
                assert_eq!(named, *globals, "{path}");
            }
            Refuses(message) => {
                let e = read.err().unwrap_or_else(|| panic!("{path} was read"));
                assert_eq!(e.to_string(), format!("{}: {message}", full.display()));
                assert_eq!(e.kind(), ErrorKind::Corrupt, "{path}");
            }
        }
    }
}

/// The extra pickle torch.load never opens is audited all the same, under its own name.
#[test]
fn a_pickle_member_torch_load_skips_is_audited_under_its_name() {
    let path = root().join(DIR).join("extra_pkl.pt");
    let ckpt = tensorplay_engine::load::open(&path).expect("extra_pkl.pt");
    let globals: Vec<(String, String, String)> = ckpt
        .unsafe_globals
        .iter()
        .map(|g| (g.module.clone(), g.name.clone(), g.member.clone()))
        .collect();
    assert_eq!(
        globals,
        [(
            "posix".to_owned(),
            "system".to_owned(),
            "archive/extra.pkl".to_owned()
        )]
    );
    let truth = truth();
    let torch = &truth["fixtures"][format!("{DIR}/extra_pkl.pt")];
    assert_eq!(torch["torch_load"]["payload_ran"], false);
}

/// Wherever torch ran the payload, `tensorplay audit` exits 1 naming TP501 or TP502; every
/// layout fails (or passes) with exactly its codes, and auditing runs nothing.
#[test]
fn audit_fails_every_layout_whose_payload_torch_ran_and_runs_nothing() {
    let truth = truth();
    let dir = std::env::temp_dir().join(format!("tensorplay-zip-layouts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut ran = 0;
    for (file, _, codes) in LAYOUTS {
        let path = format!("{DIR}/{file}");
        let out = Command::new(env!("CARGO_BIN_EXE_tensorplay"))
            .args(["audit", "--ci-mode"])
            .arg(root().join(&path))
            .current_dir(&dir)
            .output()
            .expect("runs");
        let report: serde_json::Value =
            serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut found: Vec<&str> = report["files"][0]["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["severity"] == "error")
            .map(|f| f["code"].as_str().expect("code"))
            .collect();
        found.dedup();
        assert_eq!(found, *codes, "{path}");
        let expected_exit = if codes.is_empty() { 0 } else { 1 };
        assert_eq!(
            out.status.code(),
            Some(expected_exit),
            "{path}: {}",
            stderr(&out)
        );
        if truth["fixtures"][&path]["torch_load"]["payload_ran"] == true {
            ran += 1;
            assert_eq!(out.status.code(), Some(1), "{path}");
            assert!(
                found.iter().any(|c| ["TP501", "TP502"].contains(c)),
                "{path}: {found:?}"
            );
        }
    }
    // The truth must show the attack working: most layouts made torch run the payload.
    assert_eq!(ran, 6);
    assert_eq!(
        std::fs::read_dir(&dir).expect("dir").count(),
        0,
        "auditing wrote into the working directory"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// What zipfile-based scanners see differs from what torch loads: the layouts are real
/// differentials, not just malformed files.
#[test]
fn the_truth_shows_zipfile_and_torch_disagreeing() {
    let truth = truth();
    let view = |file: &str, reader: &str| {
        truth["fixtures"][format!("{DIR}/{file}")][reader]["data_pkl"].clone()
    };
    for file in [
        "duplicate_case.pt",
        "cd_offset_elsewhere.pt",
        "prepended_pickle.pt",
    ] {
        assert_eq!(view(file, "python_zipfile"), "clean", "{file}");
        assert_eq!(
            truth["fixtures"][format!("{DIR}/{file}")]["torch_load"]["payload_ran"],
            true,
            "{file}"
        );
    }
    assert_eq!(view("duplicate_case.pt", "torch_load"), "evil");
    assert_eq!(view("cd_offset_elsewhere.pt", "torch_load"), "evil");
}
