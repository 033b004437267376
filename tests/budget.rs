//! One memory budget per run (`--max-memory`), shared by the files read side by side, against
//! files that weigh little and would take much (`fixtures/hostile/budget/`, made by `fixtures/hostile/make_budget.py`). Each is
//! refused TP506 (over-budget, not TP502 corrupt-file) naming the budget, its flag and the
//! sizes, at a small budget so no test allocates much, or read within it; the other files of
//! the run go on; `--metadata-only` reads the bomb without inflating it; deflated storages are
//! scanned as they stream, and a record that inflates to another size than it declares is
//! refused (TP502: that one is damaged). `--timeout-per-file` refuses TP506 too.

use crate::common::zip_writer::ZipWriter;
use crate::common::{
    error_findings, peak_rss, read_json, root, shape_of, stderr, stdout, tensorplay, TempDir,
};
use tensorplay_engine::load::{self, ReadLimits};
use tensorplay_engine::{numeric, Error, ErrorKind, Owner};

const DIR: &str = "fixtures/hostile/budget";
const BOMB: &str = "fixtures/hostile/budget/inflate_bomb.pt";
const AMPLIFIER: &str = "fixtures/hostile/budget/pickle_amplification.pkl";
const SHORT: &str = "fixtures/hostile/budget/inflates_short.pt";
const LONG: &str = "fixtures/hostile/budget/inflates_long.pt";
const NAN: &str = "fixtures/hostile/budget/deflated_nan.pt";
const SMALL: u64 = 16 << 20;

fn truth() -> serde_json::Value {
    read_json(&format!("{DIR}/truth.json"))
}

/// A refusal for a limit says which limit, and that the file was not judged: never that it
/// is corrupt or should be uploaded again.
fn not_called_corrupt(message: &str) {
    for word in ["corrupt", "re-upload", "re-save"] {
        assert!(!message.contains(word), "{message}");
    }
}

/// Each error finding of each file of an audit, as JSON, in report order.
fn error_json(args: &[&str]) -> (Option<i32>, Vec<serde_json::Value>) {
    let mut all = vec!["audit", "--ci-mode"];
    all.extend_from_slice(args);
    let out = tensorplay(&all);
    let report: serde_json::Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    let findings = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .flat_map(|f| f["findings"].as_array().expect("findings").clone())
        .filter(|f| f["severity"] == "error")
        .collect();
    (out.status.code(), findings)
}

/// Errors and their messages for each file of an audit, in report order.
fn audit(args: &[&str]) -> (Option<i32>, Vec<Vec<(String, String)>>) {
    let mut all = vec!["audit", "--ci-mode"];
    all.extend_from_slice(args);
    let out = tensorplay(&all);
    let report: serde_json::Value =
        serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    (out.status.code(), error_findings(&report))
}

#[test]
fn the_truth_is_what_the_fixtures_claim() {
    let truth = truth();
    let bomb = &truth["inflate_bomb.pt"];
    assert_eq!(bomb["inflates_to"], 64 << 20);
    assert!(bomb["bytes_on_disk"].as_u64().expect("size") < 1 << 20);
    let loads = bomb["torch_load_weights_only"].as_str().expect("verdict");
    assert!(
        loads.starts_with("loads: storages hold 67108864 bytes"),
        "{loads}"
    );
    let amp = &truth["pickle_amplification.pkl"];
    assert!(amp["bytes_on_disk"].as_u64().expect("size") < 100_000);
    assert!(
        amp["string_copies_a_name_keeping_reader_makes"]
            .as_u64()
            .expect("n")
            > 1 << 30
    );
    for loader in ["torch_load_weights_only", "pickle_load"] {
        let verdict = amp[loader].as_str().expect("verdict");
        assert!(verdict.starts_with("refused: "), "{loader}: {verdict}");
    }
}

/// The bomb's storage record is inflated piece by piece (to check its size, then to scan
/// it), never whole: it passes at a budget a quarter of what it inflates to.
#[test]
fn an_inflate_bomb_is_streamed_within_the_budget() {
    let (code, files) = audit(&["--max-memory", "16MiB", BOMB]);
    assert_eq!(code, Some(0), "{files:?}");
    assert_eq!(files, [Vec::<(String, String)>::new()]);
}

#[test]
fn a_pickle_that_amplifies_is_refused_naming_the_budget() {
    let (code, files) = audit(&["--max-memory", "16MiB", AMPLIFIER]);
    assert_eq!(code, Some(1));
    let [file] = files.as_slice() else {
        panic!("{files:?}")
    };
    // The globals its pickle named before the refusal, once each, then the refusal.
    let [(global, _), (rule, message)] = file.as_slice() else {
        panic!("{file:?}")
    };
    assert_eq!((global.as_str(), rule.as_str()), ("TP501", "TP506"));
    let budget =
        format!("{AMPLIFIER}: exceeds the memory budget (--max-memory): the read would hold ");
    assert!(message.starts_with(&budget), "{message}");
    assert!(
        message.contains(
            ", more than the 16.0 MiB (16777216 bytes) allowed, for the values pickle <pickle> \
             builds (at byte "
        ),
        "{message}"
    );
    // The globals met before the refusal are still named.
    assert!(message.contains("also reference unsafe globals: mmm"));
    not_called_corrupt(message);
    // The fix raises the flag above what the read needed so far.
    let (_, findings) = error_json(&["--max-memory", "16MiB", AMPLIFIER]);
    let refusal = findings.last().expect("the refusal");
    assert_eq!(refusal["code"], "TP506");
    assert_eq!(refusal["rule"], "over-budget");
    let fix = refusal["fix"].as_str().expect("fix");
    assert!(
        fix.contains(
            "raise --max-memory above the 16.0 MiB it needed so far, e.g. --max-memory 17MiB"
        ),
        "{fix}"
    );
    assert!(
        fix.contains("not found corrupt") && !fix.contains("re-upload"),
        "{fix}"
    );
}

/// Whether a TP501 finding names a global of `module` (or one whose module starts so).
fn named_in(findings: &[serde_json::Value], module: &str) -> bool {
    findings.iter().any(|f| {
        f["code"] == "TP501"
            && f["global"]["module"]
                .as_str()
                .is_some_and(|m| m.starts_with(module))
    })
}

#[test]
fn what_follows_the_refusal_of_an_amplifying_pickle_is_named() {
    // CPython builds the values and reads on to a call placed before the STOP: the refusal
    // at the budget still names it (a walk that builds nothing).
    let bytes = std::fs::read(root().join(AMPLIFIER)).expect("fixture");
    let (body, stop) = bytes.split_at(bytes.len() - 1);
    assert_eq!(stop, b".");
    let dir = TempDir::new("budget-amplifier-call");
    let path = dir.0.join("model.pkl");
    let call = b"cos\nsystem\n(S'true'\ntR0";
    std::fs::write(&path, [body, call, stop].concat()).expect("write");
    let (code, findings) = error_json(&["--max-memory", "16MiB", path.to_str().expect("utf-8")]);
    assert_eq!(code, Some(1));
    let named = |module: &str| named_in(&findings, module);
    // The call, and the (long) globals met before the refusal.
    assert!(named("os") && named("mmm"), "{findings:?}");
    assert_eq!(findings.last().map(|f| &f["code"]), Some(&"TP506".into()));

    // The same pickle as a torch archive's data.pkl: the archive's refusal names it too.
    let mut zip = ZipWriter::default();
    zip.add("archive/data.pkl", &[body, call, stop].concat());
    zip.add("archive/version", b"3\n");
    let archive = dir.0.join("model.pt");
    std::fs::write(&archive, zip.finish()).expect("write");
    let (code, findings) = error_json(&["--max-memory", "16MiB", archive.to_str().expect("utf-8")]);
    assert_eq!(code, Some(1));
    assert!(named_in(&findings, "os"), "{findings:?}");
    assert_eq!(findings.last().map(|f| &f["code"]), Some(&"TP506".into()));
}

#[test]
fn the_other_files_of_the_run_go_on() {
    let clean = "fixtures/pytorch/deflated.pt";
    let (code, files) = audit(&["--max-memory", "16MiB", SHORT, clean, AMPLIFIER]);
    assert_eq!(code, Some(1));
    let codes: Vec<Vec<&str>> = files
        .iter()
        .map(|f| f.iter().map(|(c, _)| c.as_str()).collect())
        .collect();
    assert_eq!(codes.len(), 3);
    // The short record is damaged (TP502); the amplifier is over the budget (TP506, after
    // the globals it named); the clean file passes.
    let mut codes = codes;
    codes.sort();
    assert_eq!(
        codes,
        [vec![], vec!["TP501", "TP506"], vec!["TP502"]],
        "{files:?}"
    );
}

/// `--metadata-only` records where the deflated record is and what it declares, and never
/// inflates it: the bomb passes at a budget a quarter of its claim. The peak RSS is printed,
/// not asserted.
#[test]
fn metadata_only_reads_the_bomb_without_inflating_it() {
    let (code, files) = audit(&["--metadata-only", "--max-memory", "16MiB", BOMB]);
    assert_eq!(code, Some(0), "{files:?}");
    assert_eq!(files, [Vec::<(String, String)>::new()]);

    for args in [&["--metadata-only"][..], &[]] {
        let out = tensorplay(&[&["audit", "--ci-mode", "--verbose"], args, &[BOMB]].concat());
        println!(
            "audit {args:?} of the bomb (64 MiB claimed): peak RSS {} MiB",
            peak_rss(&out) >> 20
        );
    }
}

#[test]
fn the_engine_defers_or_refuses_by_its_limits() {
    let path = root().join(BOMB);
    let read = |storage_bytes, hold_storages, max_memory| {
        let limits = ReadLimits {
            max_memory,
            storage_bytes,
            hold_storages,
        };
        load::read_with(load::probe(&path).expect("probe"), limits)
    };
    // Metadata-only, and a read that checks the record: both leave it compressed in the file.
    for storage_bytes in [false, true] {
        let ckpt = read(storage_bytes, false, SMALL).expect("reads");
        let storage = &ckpt.storages[0];
        assert_eq!(storage.data_ptr().len(), 64 << 20);
        assert!(storage.data_ptr().bytes().is_none());
        assert!(matches!(storage.data_ptr().owner(), Owner::Deferred(_)));
    }
    // A library read with the default limits holds it, as torch.load does.
    let ckpt = load::open(&path).expect("reads");
    assert_eq!(
        ckpt.storages[0].data_ptr().bytes().map(<[u8]>::len),
        Some(64 << 20)
    );

    // Holding it whole (a GPU load) is charged to the budget, beside its small directory.
    let refused = read(true, true, SMALL).unwrap_err();
    let claim = 64 << 20;
    assert!(
        matches!(refused, Error::MemoryBudget { needed, limit, .. }
            if (claim..claim + (1 << 16)).contains(&needed) && limit == SMALL),
        "{refused}"
    );
    assert_eq!(refused.kind(), ErrorKind::OverBudget);
    let ckpt = read(true, true, 1 << 30).expect("reads");
    let bytes = ckpt.storages[0].data_ptr().bytes().expect("inflated");
    assert_eq!(bytes.len(), 64 << 20);
    assert!(bytes.iter().all(|&b| b == 0));
}

/// A deflated storage made by torch, NaN and ±Inf in it, seen through a contiguous, a
/// transposed and a strided view: the streamed scan finds what torch finds, and what the
/// scan of the same bytes held whole finds.
#[test]
fn a_deflated_storage_is_scanned_as_it_streams() {
    let truth = &truth()["deflated_nan.pt"];
    assert!(truth["bytes_on_disk"].as_u64().expect("size") < 16 << 10);
    let (code, files) = audit(&["--max-memory", "2MiB", NAN]);
    assert_eq!(code, Some(1));
    let [file] = files.as_slice() else {
        panic!("{files:?}")
    };
    let tensors = truth["tensors"].as_object().expect("tensors");
    assert_eq!(file.len(), tensors.len(), "{file:?}");
    for (name, t) in tensors {
        let numel: u64 = shape_of(&t["shape"]).iter().product();
        let expected = format!(
            "'{name}' (float32) holds {} NaN, {} +Inf, {} -Inf among {numel} elements; first at index {}",
            t["nan"], t["pos_inf"], t["neg_inf"], t["first"]
        );
        assert!(
            file.contains(&("TP401".to_owned(), expected.clone())),
            "{expected}\n{file:?}"
        );
    }

    let path = root().join(NAN);
    let read = |hold_storages| {
        let limits = ReadLimits {
            hold_storages,
            ..ReadLimits::default()
        };
        load::read_with(load::probe(&path).expect("probe"), limits).expect("reads")
    };
    let (streamed, held) = (read(false), read(true));
    assert!(matches!(
        streamed.storages[0].data_ptr().owner(),
        Owner::Deferred(_)
    ));
    assert!(held.storages[0].data_ptr().bytes().is_some());
    let streamed = numeric::scan_checkpoint(&streamed, None);
    assert_eq!(streamed.len(), 3);
    assert_eq!(streamed, numeric::scan_checkpoint(&held, None));
}

/// A record whose deflate stream gives more or fewer bytes than its headers and the pickle
/// declare is refused naming the file and the record (torch.load refuses the short one; it
/// reads the long one's first declared bytes, which leaves what the record holds ambiguous).
#[test]
fn a_record_that_inflates_to_another_size_is_refused() {
    let truth = truth();
    let short = truth["inflates_short.pt"]["torch_load_weights_only"]
        .as_str()
        .expect("verdict");
    assert!(short.contains("unexpected decompressed size"), "{short}");
    for (file, detail) in [
        (LONG, "inflates past its declared 2621440 bytes"),
        (SHORT, "inflates to 2621432 bytes, not the declared 2621440"),
    ] {
        let (code, files) = audit(&[file]);
        assert_eq!(code, Some(1));
        assert_eq!(
            files,
            [[(
                "TP502".to_owned(),
                format!("{file}: archive/data/0: {detail}")
            )]]
        );
        // --metadata-only reads where the record is, not what it inflates to.
        let (code, _) = audit(&["--metadata-only", file]);
        assert_eq!(code, Some(0), "{file}");
    }
}

/// `max_memory` in `tensorplay.toml` sets the budget; `--max-memory` overrides it.
#[test]
fn the_config_file_sets_the_budget_and_the_flag_overrides_it() {
    let dir = TempDir::new("budget-config");
    let config = dir.0.join("tensorplay.toml");
    // Smaller than what this fixture's central directory takes.
    std::fs::write(&config, "max_memory = 100\n").expect("config");
    let config = config.to_str().expect("utf-8 path");
    let clean = "fixtures/pytorch/deflated.pt";
    let (code, files) = audit(&["--config", config, clean]);
    assert_eq!(code, Some(1));
    let [(rule, message)] = files
        .concat()
        .try_into()
        .unwrap_or_else(|f| panic!("{f:?}"));
    assert_eq!(rule, "TP506");
    assert!(
        message.starts_with(&format!(
            "{clean}: exceeds the memory budget (--max-memory): the read would hold "
        )) && message.ends_with(
            " bytes), more than the 100 bytes allowed, for the central directory's 10 entries"
        ),
        "{message}"
    );
    // The fix names the config key that set it, beside the flag.
    let (_, findings) = error_json(&["--config", config, clean]);
    let fix = findings[0]["fix"].as_str().expect("fix");
    assert!(
        fix.contains("--max-memory ") && fix.contains("max_memory = \""),
        "{fix}"
    );
    let (code, files) = audit(&["--config", config, "--max-memory", "1MiB", clean]);
    assert_eq!(code, Some(0), "{files:?}");

    std::fs::write(dir.0.join("tensorplay.toml"), "max_memory = \"lots\"\n").expect("config");
    let out = tensorplay(&["audit", "--ci-mode", "--config", config, clean]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("tensorplay.toml:1: `max_memory`: unknown unit 'lots'"),
        "{}",
        stderr(&out)
    );
}

/// The budget is the run's: four files that each need more than it, read side by side, get a
/// share each and are then read again alone, so the process stays near one file's budget
/// (four at once once peaked at 3.9 GiB under 1 GiB) and each verdict is the one the file
/// gets alone.
#[test]
fn files_read_side_by_side_share_one_budget() {
    let dir = TempDir::new("shared-budget");
    let source = root().join(AMPLIFIER);
    for k in 1..=4 {
        std::fs::copy(&source, dir.0.join(format!("copy{k}.pkl"))).expect("copy");
    }
    let folder = dir.0.to_str().expect("utf-8");
    let args = ["audit", "--ci-mode", "--verbose", "--max-memory", "128MiB"];
    let together = tensorplay(&[&args[..], &["--jobs", "4", folder]].concat());
    assert_eq!(together.status.code(), Some(1), "{}", stderr(&together));
    // One file's budget and what a debug build carries besides, not four budgets.
    let peak = peak_rss(&together);
    assert!(peak < 448 << 20, "peak RSS {} MiB", peak >> 20);
    let alone = tensorplay(&[&args[..], &[&format!("{folder}/copy1.pkl")]].concat());
    let last_message = |out: &std::process::Output| -> Vec<String> {
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        report["files"]
            .as_array()
            .expect("files")
            .iter()
            .map(|f| {
                let message = f["findings"]
                    .as_array()
                    .and_then(|a| a.last())
                    .expect("a finding")["message"]
                    .as_str()
                    .expect("message");
                // The same words whichever copy: the path aside.
                message
                    .split_once(": ")
                    .map_or(message, |(_, rest)| rest)
                    .to_owned()
            })
            .collect()
    };
    let alone = last_message(&alone);
    assert!(
        alone[0].contains("exceeds the memory budget (--max-memory): ")
            && alone[0].contains("more than the 128.0 MiB (134217728 bytes) allowed"),
        "{alone:?}"
    );
    assert_eq!(last_message(&together), vec![alone[0].clone(); 4]);
}

/// A file not judged within `--timeout-per-file` fails TP506 unjudged, at once, and the other
/// files of the run are judged as ever: a slow file never hangs the gate.
#[test]
fn a_file_past_the_time_limit_fails_and_the_others_go_on() {
    let start = std::time::Instant::now();
    let (code, errors) = audit(&["--timeout-per-file", "1", AMPLIFIER, SHORT]);
    assert!(start.elapsed().as_secs() < 8, "{:?}", start.elapsed());
    assert_eq!(code, Some(1));
    let timed_out = (
        "TP506".to_owned(),
        format!(
            "{AMPLIFIER}: exceeds the time limit per file (--timeout-per-file): not judged \
             within the 1 s allowed; its reading was abandoned"
        ),
    );
    not_called_corrupt(&timed_out.1);
    assert!(
        errors
            .iter()
            .any(|file| file == std::slice::from_ref(&timed_out)),
        "{errors:?}"
    );
    // The other file's own verdict.
    assert!(
        errors
            .iter()
            .flatten()
            .any(|(_, m)| m.starts_with(SHORT) && m.contains("inflates to")),
        "{errors:?}"
    );
    // The fix raises the flag, and says the file is not known to be damaged.
    let (_, findings) = error_json(&["--timeout-per-file", "1", AMPLIFIER]);
    let fix = findings[0]["fix"].as_str().expect("fix");
    assert!(fix.contains("--timeout-per-file 2"), "{fix}");
    assert!(
        fix.contains("not found corrupt") && !fix.contains("re-upload"),
        "{fix}"
    );
}

/// The names a zip archive's pickle gives its tensors are held for the rest of the read and
/// charged to the read's budget, as a legacy file's are: `long_names.pt`'s 8 001 names of
/// 8 000 bytes once went to a meter the archive's reading threw away.
#[test]
fn the_tensor_names_of_a_zip_archive_are_charged_to_its_read() {
    let path = root().join("fixtures/hostile/fuzz/long_names.pt");
    let ckpt = load::open(&path).expect("read");
    assert!(ckpt.held_bytes >= 8001 * 8000, "{}", ckpt.held_bytes);
}
