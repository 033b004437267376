//! `tensorplay convert` against what the real safetensors package read from its output
//! (fixtures/convert/truth.json, written by fixtures/make_convert.py, which also checked each
//! written tensor against torch's own reading of the input).

use crate::common::{read_json, root, stderr, stdout, tensorplay, TempDir};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use tensorplay_engine::elements::Elements;
use tensorplay_engine::load;

#[test]
fn every_torch_readable_fixture_converts_as_the_safetensors_package_read_it() {
    let truth = read_json("fixtures/convert/truth.json");
    let truth = truth.as_array().expect("conversions");
    assert!(truth.len() >= 10, "{truth:?}");
    assert!(
        truth.iter().any(|e| e.get("shards").is_some()),
        "a sharded conversion"
    );
    for (k, expected) in truth.iter().enumerate() {
        let input = expected["input"].as_str().unwrap();
        let temp = TempDir::new(&format!("convert-{k}"));
        let dir = &temp.0;
        let out = dir.join("out.safetensors");
        let mut args = vec!["convert"];
        let flags: Vec<&str> = expected["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        args.extend(flags);
        args.extend([input, out.to_str().unwrap()]);
        let run = tensorplay(&args);
        assert_eq!(
            run.status.code().map(i64::from),
            expected["exit"].as_i64(),
            "{input}: {}",
            stderr(&run)
        );
        if let Some(error) = expected["error"].as_str() {
            assert_eq!(stderr(&run).trim(), error, "{input}");
            let left: Vec<_> = std::fs::read_dir(dir).unwrap().collect();
            assert!(
                left.is_empty(),
                "{input}: a refused conversion left {left:?}"
            );
            continue;
        }
        // What holds no tensor in torch's reading is named as left out, never dropped silently.
        let left_out: Vec<&str> = expected["left_out"]
            .as_array()
            .expect("left_out")
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        let said = stdout(&run);
        // A TorchScript archive is written as its module's state_dict(): its other tensors
        // are named as left out, with what the module holds each as.
        const OUTSIDE: &str = " the TorchScript module's state_dict() does not list: ";
        let outside = said.lines().find_map(|l| l.split_once(OUTSIDE));
        match expected["outside_state_dict"].as_array() {
            Some(names) if !names.is_empty() => {
                let (count, said_names) = outside.expect("a line of tensors left out");
                assert_eq!(
                    count,
                    format!(
                        "left out {} tensor{}",
                        names.len(),
                        if names.len() == 1 { "" } else { "s" }
                    ),
                    "{input}"
                );
                let names: Vec<&str> = names.iter().map(|n| n.as_str().unwrap()).collect();
                assert_eq!(shown(said_names), shown_of(&names), "{input}");
            }
            _ => assert!(outside.is_none(), "{input}: {said}"),
        }
        let line = said
            .lines()
            .find(|l| l.starts_with("left out ") && !l.contains(OUTSIDE));
        match line {
            None => assert!(left_out.is_empty(), "{input}: {said}"),
            Some(line) => {
                let (count, names) = line
                    .strip_prefix("left out ")
                    .and_then(|l| l.split_once(" value"))
                    .and_then(|(n, rest)| Some((n, rest.split_once("): ")?.1)))
                    .expect("left out N values (…): names");
                assert_eq!(count, left_out.len().to_string(), "{input}: {line}");
                assert_eq!(shown(names), shown_of(&left_out), "{input}");
            }
        }
        let read_from = match expected.get("shards").and_then(|s| s.as_object()) {
            None => out.clone(),
            Some(shards) => {
                // Each shard holds the tensors the safetensors package found in it.
                for (file, names) in shards {
                    let shard =
                        load::open(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
                    let mut got: Vec<&str> = shard.tensors.iter().map(|t| t.name()).collect();
                    got.sort_unstable();
                    let want: Vec<&str> = names
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|n| n.as_str().unwrap())
                        .collect();
                    assert_eq!(got, want, "{input}: {file}");
                }
                dir.join("out.safetensors.index.json")
            }
        };
        let ckpt = load::open(&read_from).unwrap_or_else(|e| panic!("{input}: {e}"));
        let want = expected["tensors"].as_object().unwrap();
        assert_eq!(ckpt.tensors.len(), want.len(), "{input}");
        for t in &ckpt.tensors {
            let w = &want[t.name()];
            let imp = t.tensor_impl();
            assert_eq!(
                imp.dtype().name(),
                w["dtype"].as_str().unwrap(),
                "{input}: {}",
                t.name()
            );
            let shape: Vec<u64> = w["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(
                imp.layout().sizes(),
                shape.as_slice(),
                "{input}: {}",
                t.name()
            );
            assert!(imp.layout().is_contiguous(), "{input}: {}", t.name());
            let mut hasher = Sha256::new();
            for e in Elements::of(t).expect("bytes") {
                hasher.update(e.expect("in bounds"));
            }
            assert_eq!(
                format!("{:x}", hasher.finalize()),
                w["sha256"].as_str().unwrap(),
                "{input}: {}",
                t.name()
            );
        }
        if expected.get("shards").is_none() {
            let metadata: BTreeMap<String, String> = ckpt.metadata.clone().into_iter().collect();
            let want_metadata: BTreeMap<String, String> =
                serde_json::from_value(expected["metadata"].clone()).unwrap();
            assert_eq!(metadata, want_metadata, "{input}");
        }
        assert!(stdout(&run).contains("every tensor verified"), "{input}");
    }
}

#[test]
fn unsafe_globals_and_non_finite_values_are_refused_unless_allowed() {
    let temp = TempDir::new("convert-refuse");
    let dir = &temp.0;
    let out = dir.join("out.safetensors");
    let run = tensorplay(&[
        "convert",
        "fixtures/pytorch/payload_os_system.pt",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(1));
    assert!(stderr(&run).contains("posix.system"), "{}", stderr(&run));
    assert!(!out.exists());
    // Allowing the global writes the tensors the file holds; posix.system is still never run.
    let run = tensorplay(&[
        "convert",
        "--allow-global",
        "posix.system",
        "fixtures/pytorch/payload_os_system.pt",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let written = load::open(&out).expect("converted");
    let names: Vec<&str> = written.tensors.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["weight"]);
    assert!(written.unsafe_globals.is_empty());

    let nan = dir.join("nan.safetensors");
    let run = tensorplay(&[
        "convert",
        "fixtures/safetensors/special_values.safetensors",
        nan.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(1));
    assert!(stderr(&run).contains("non-finite"), "{}", stderr(&run));
    assert!(!nan.exists());
    let run = tensorplay(&[
        "convert",
        "--allow-nonfinite",
        "fixtures/safetensors/special_values.safetensors",
        nan.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
}

#[test]
fn the_input_is_never_the_output() {
    let input = root().join("fixtures/diff/base.safetensors");
    let before = std::fs::read(&input).unwrap();
    let run = tensorplay(&[
        "convert",
        "fixtures/diff/base.safetensors",
        "fixtures/diff/base.safetensors",
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        stderr(&run).contains("the output is the input"),
        "{}",
        stderr(&run)
    );
    assert_eq!(std::fs::read(&input).unwrap(), before);
}

#[test]
fn a_cast_that_overflows_is_refused_unless_non_finite_values_are_allowed() {
    let temp = TempDir::new("convert-overflow");
    let dir = &temp.0;
    // 1.0 and 70 000 as float32: the second is past float16's largest finite value (65 504).
    let header = r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&1.0f32.to_le_bytes());
    bytes.extend_from_slice(&70000f32.to_le_bytes());
    let input = dir.join("in.safetensors");
    std::fs::write(&input, bytes).unwrap();
    let out = dir.join("out.safetensors");
    let args = |extra: &[&'static str]| {
        let mut a = vec!["convert", "--dtype", "float16"];
        a.extend_from_slice(extra);
        a
    };
    let paths = [input.to_str().unwrap(), out.to_str().unwrap()];
    let run = tensorplay(&[args(&[]).as_slice(), &paths].concat());
    assert_eq!(run.status.code(), Some(1));
    assert!(
        stderr(&run).contains("tensor 'x': 1 of its finite values overflow float16"),
        "{}",
        stderr(&run)
    );
    assert!(!out.exists());

    let run = tensorplay(&[args(&["--allow-nonfinite"]).as_slice(), &paths].concat());
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let written = load::open(&out).expect("converted");
    let x = &written.tensors[0];
    assert_eq!(x.tensor_impl().dtype().name(), "float16");
    let elements: Vec<&[u8]> = Elements::of(x).unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(elements, [&[0x00, 0x3c][..], &[0x00, 0x7c][..]]); // 1.0, +Inf

    let run = tensorplay(&["convert", "--dtype", "int8", paths[0], paths[1]]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        stderr(&run).contains("expected float16, bfloat16, float32 or float64, not 'int8'"),
        "{}",
        stderr(&run)
    );
}

/// Converted files get the mode any new file gets (0666 less the umask), not the safetensors
/// writer's private 0600.
#[cfg(unix)]
#[test]
fn converted_files_follow_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let temp = TempDir::new("convert-mode");
    let probe = temp.0.join("probe");
    std::fs::write(&probe, b"").unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let out = temp.0.join("out.safetensors");
    let run = tensorplay(&[
        "convert",
        "--max-shard-size",
        "40B",
        "fixtures/pytorch/state_dict.pt",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let written: Vec<_> = std::fs::read_dir(&temp.0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != &probe)
        .collect();
    assert!(written.len() > 2, "{written:?}");
    for file in written {
        assert_eq!(mode(&file), mode(&probe), "{file:?}");
    }
}

/// How many names a left-out line shows before `and N more`.
const SHOWN: usize = 20;

/// The names a left-out line shows, and how many more it counts.
fn shown(line: &str) -> (Vec<&str>, usize) {
    let (names, more) = match line.rsplit_once(" and ") {
        Some((names, more)) if more.ends_with(" more") => {
            let n = more.trim_end_matches(" more").parse().expect("a count");
            (names, n)
        }
        _ => (line, 0),
    };
    (names.split(", ").collect(), more)
}

/// What a left-out line of `names` shows: the first [`SHOWN`], and how many more.
fn shown_of<'a>(names: &[&'a str]) -> (Vec<&'a str>, usize) {
    let first = names.iter().take(SHOWN).copied().collect();
    (first, names.len().saturating_sub(SHOWN))
}
