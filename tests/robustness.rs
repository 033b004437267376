//! Hostile bytes never panic a reader, and a cut checkpoint is never read as whole. Every
//! family of good fixtures is swept: the single files the truth files name (safetensors,
//! PyTorch zip, legacy, TorchScript), `.pt2` archives, the tensor kinds, plain pickles and the
//! old tar format (which torch reads and tensorplay refuses whole), NumPy's `.npy` and `.npz`
//! files and GGUF files, one file at a time through `load::from_buffer`; sharded indexes and DCP directories,
//! copied into a temporary folder with one of their files cut or corrupted at a time, through
//! `load::open`. A format that no family reads as fails the sweep.

use crate::common::{good_truth_files, read_json, root, TempDir};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use tensorplay_engine::load::{self, from_buffer};
use tensorplay_engine::{Checkpoint, Error, ErrorKind, Format, HostBuffer};

/// Where a family's good fixtures are listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    /// A `*.truth.json` beside the file: safetensors, PyTorch zip and legacy, TorchScript.
    TruthFile,
    /// A `*.index.truth.json`: a sharded index with its shards.
    ShardedIndex,
    /// `fixtures/pt2/truth.json`: `torch.export.save` archives.
    Pt2,
    /// `fixtures/pytorch/kinds/truth.json`: quantized, sparse, nested, subclassed tensors.
    TensorKinds,
    /// `fixtures/hostile/discovery/truth.json`: plain `pickle.dump` files.
    PlainPickle,
    /// `fixtures/hostile/legacy/truth.json`: the old `torch.save` tar format.
    LegacyTar,
    /// `fixtures/dcp/truth.json`: `torch.distributed.checkpoint` directories.
    Dcp,
    /// `fixtures/numpy/truth.json`: `.npy` and `.npz` files numpy wrote.
    Numpy,
    /// `fixtures/gguf/truth.json`: GGUF files gguf-py wrote, each ending with its last tensor.
    Gguf,
    /// `fixtures/joblib/truth.json`: joblib files joblib wrote, uncompressed.
    Joblib,
}

const FAMILIES: [Family; 10] = [
    Family::TruthFile,
    Family::ShardedIndex,
    Family::Pt2,
    Family::TensorKinds,
    Family::PlainPickle,
    Family::LegacyTar,
    Family::Dcp,
    Family::Numpy,
    Family::Gguf,
    Family::Joblib,
];

/// Every format the engine reads. Each names the one after it in a match without a wildcard:
/// a format added to the engine does not compile here until it is placed in the chain, and
/// then fails the sweep until some family's fixture reads as it.
fn every_format() -> Vec<Format> {
    let after = |f: Format| match f {
        Format::Safetensors => Some(Format::SafetensorsIndex),
        Format::SafetensorsIndex => Some(Format::PytorchZip),
        Format::PytorchZip => Some(Format::PytorchLegacy),
        Format::PytorchLegacy => Some(Format::Torchscript),
        Format::Torchscript => Some(Format::PytorchIndex),
        Format::PytorchIndex => Some(Format::Pickle),
        Format::Pickle => Some(Format::Distributed),
        Format::Distributed => Some(Format::Pt2),
        Format::Pt2 => Some(Format::Numpy),
        Format::Numpy => Some(Format::NumpyArchive),
        Format::NumpyArchive => Some(Format::Gguf),
        Format::Gguf => Some(Format::Joblib),
        Format::Joblib => None,
        // Not read from a file: a live process's tensors (the Python module) are this.
        Format::Live => None,
        // Chosen by file name, holding text: a cut template is still a template, judged by
        // the template rules (tests/chat_templates.rs), not refused as corrupt.
        Format::ChatTemplate => None,
        // A zip whose root config.json Keras reads: a cut archive is refused in
        // tests/keras.rs (the zip reader is the torch archives', swept here already).
        Format::Keras => None,
        // Recognised by its signature and failed unread (TP716): there is nothing to cut.
        Format::Hdf5 => None,
        // A zip whose members are torch.save archives and JSON: a cut model is refused in
        // tests/sb3.rs (the zip and torch archive readers are swept here already).
        Format::StableBaselines3 => None,
    };
    std::iter::successors(Some(Format::Safetensors), |&f| after(f)).collect()
}

fn format_named(name: &str) -> Format {
    every_format()
        .into_iter()
        .find(|f| f.name() == name)
        .unwrap_or_else(|| panic!("no format is named {name}"))
}

/// A file's name and bytes.
type NamedFile = (String, Vec<u8>);

/// The bytes of a fixture.
enum Files {
    /// One file, read through `load::from_buffer`.
    One(Vec<u8>),
    /// A checkpoint of several files, written into a folder and read through `load::open`:
    /// `open` names the file it is given (an index), or is empty for the folder itself.
    Several { open: String, files: Vec<NamedFile> },
}

/// One good fixture of a family.
struct Fixture {
    family: Family,
    /// Relative to the root.
    path: String,
    /// The format its whole read has; `None` for a file torch reads and tensorplay refuses
    /// whole (the old tar format).
    format: Option<Format>,
    files: Files,
}

fn bytes_at(relative: &str) -> Vec<u8> {
    std::fs::read(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

fn one(family: Family, path: String, format: Option<Format>) -> Fixture {
    let files = Files::One(bytes_at(&path));
    Fixture {
        family,
        path,
        format,
        files,
    }
}

/// Every family's good fixtures, read once for all the tests.
fn fixtures() -> &'static [Fixture] {
    static FIXTURES: OnceLock<Vec<Fixture>> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let mut all = Vec::new();
        for truth in good_truth_files() {
            let truth = read_json(&truth);
            let path = truth["inspect"]["path"].as_str().expect("path").to_owned();
            let format = format_named(truth["inspect"]["format"].as_str().expect("format"));
            if !matches!(format, Format::SafetensorsIndex | Format::PytorchIndex) {
                all.push(one(Family::TruthFile, path, Some(format)));
                continue;
            }
            // The index and the shards its weight_map names, side by side.
            let dir = Path::new(&path).parent().expect("index folder");
            let index = Path::new(&path).file_name().expect("index name");
            let index = index.to_string_lossy().into_owned();
            let shards: BTreeSet<String> = read_json(&path)["weight_map"]
                .as_object()
                .expect("weight_map")
                .values()
                .map(|s| s.as_str().expect("shard").to_owned())
                .collect();
            let files = std::iter::once(index.clone())
                .chain(shards)
                .map(|name| {
                    let bytes = bytes_at(&dir.join(&name).to_string_lossy());
                    (name, bytes)
                })
                .collect();
            all.push(Fixture {
                family: Family::ShardedIndex,
                path,
                format: Some(format),
                files: Files::Several { open: index, files },
            });
        }
        let pt2 = read_json("fixtures/pt2/truth.json");
        for path in pt2["archives"].as_object().expect("archives").keys() {
            all.push(one(Family::Pt2, path.clone(), Some(Format::Pt2)));
        }
        // Each kind's tensors as torch reads them; the one entry without, a packed tensor
        // grown past its storage, records only that torch accepts it.
        let kinds = read_json("fixtures/pytorch/kinds/truth.json");
        for (name, truth) in kinds.as_object().expect("kinds") {
            if truth.get("tensors").is_some() {
                let path = format!("fixtures/pytorch/kinds/{name}");
                all.push(one(Family::TensorKinds, path, Some(Format::PytorchZip)));
            }
        }
        // One pickle of protocol 4 (meta tensors) and one of protocol 0 (numpy arrays).
        let discovery = &read_json("fixtures/hostile/discovery/truth.json")["files"];
        for path in [
            "fixtures/hostile/discovery/meta_tensors.pkl",
            "fixtures/hostile/discovery/arrays_protocol0",
        ] {
            let truth = &discovery[path];
            assert_eq!(truth["kind"], "plain pickle", "{path}");
            assert_eq!(truth["pickle_load"]["loaded"], true, "{path}");
            all.push(one(
                Family::PlainPickle,
                path.to_owned(),
                Some(Format::Pickle),
            ));
        }
        let tar = &read_json("fixtures/hostile/legacy/truth.json")["tar_clean.pt"];
        assert!(
            tar["torch_load"]["error"].is_null(),
            "torch reads it: {tar}"
        );
        let path = "fixtures/hostile/legacy/tar_clean.pt".to_owned();
        all.push(one(Family::LegacyTar, path, None));
        let dcp = read_json("fixtures/dcp/truth.json");
        for (name, truth) in dcp.as_object().expect("dcp") {
            let Some(names) = truth.get("files").and_then(|f| f.as_array()) else {
                continue; // the library's version, the bad directories' reasons
            };
            let path = format!("fixtures/dcp/{name}");
            let files = names
                .iter()
                .map(|n| {
                    let n = n.as_str().expect("file name").to_owned();
                    let bytes = bytes_at(&format!("{path}/{n}"));
                    (n, bytes)
                })
                .collect();
            all.push(Fixture {
                family: Family::Dcp,
                path,
                format: Some(Format::Distributed),
                files: Files::Several {
                    open: String::new(),
                    files,
                },
            });
        }
        let numpy = read_json("fixtures/numpy/truth.json");
        for (path, truth) in numpy["files"].as_object().expect("files") {
            // Bytes after the array are ignored, as np.load ignores them: a cut there cuts
            // nothing read.
            let ignored_tail = truth["arrays"][0]["trailing_bytes"].as_u64() != Some(0);
            if ignored_tail && path.ends_with(".npy") {
                continue;
            }
            let format = format_named(truth["format"].as_str().expect("format"));
            all.push(one(Family::Numpy, path.clone(), Some(format)));
        }
        // make_gguf.py writes each good file to end with its last tensor's bytes: every cut
        // cuts something gguf-py reads.
        let gguf = read_json("fixtures/gguf/truth.json");
        for path in gguf["files"].as_object().expect("files").keys() {
            all.push(one(Family::Gguf, path.clone(), Some(Format::Gguf)));
        }
        // Uncompressed joblib files end with their pickle's STOP: every cut cuts something
        // joblib.load reads. (A compressed one cut in its checksum still inflates whole.)
        let joblib = read_json("fixtures/joblib/truth.json");
        for (name, truth) in joblib.as_object().expect("truth") {
            if truth.get("arrays").is_some() && truth.get("compressor").is_none() {
                let path = format!("fixtures/joblib/{name}");
                all.push(one(Family::Joblib, path, Some(Format::Joblib)));
            }
        }
        all
    })
}

fn read(bytes: Vec<u8>) -> tensorplay_engine::Result<Checkpoint> {
    from_buffer(HostBuffer::from_vec("mutated", bytes))
}

/// The lengths a file is cut to: every one within 256 bytes of either end (headers, a zip's
/// central directory), every 7th between, shifted by `salt` so that files differ in which.
fn cut_lengths(len: usize, salt: usize) -> impl Iterator<Item = usize> {
    const EDGE: usize = 256;
    (0..len).filter(move |&n| n < EDGE || n + EDGE >= len || (n + salt).is_multiple_of(7))
}

/// The old tar format, recognised and refused whatever it holds.
fn is_tar_refusal(e: &Error) -> bool {
    matches!(e, Error::UnsupportedFormat { format, .. } if format.starts_with("old PyTorch tar"))
}

fn write_files(dir: &Path, files: &[NamedFile]) {
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write");
    }
}

fn open_in(dir: &Path, open: &str) -> tensorplay_engine::Result<Checkpoint> {
    load::open(&dir.join(open))
}

fn tensor_names(ckpt: &Checkpoint) -> Vec<&str> {
    ckpt.tensors.iter().map(|t| t.name()).collect()
}

/// Every family is swept and every format is read by one of them: a family listed here
/// without fixtures, or a format no fixture reads as, fails. Each whole fixture reads as its
/// truth says (the tar file is refused as the format it is).
#[test]
fn every_family_and_every_format_is_swept() {
    let mut families = BTreeSet::new();
    let mut formats = BTreeSet::new();
    for fixture in fixtures() {
        families.insert(fixture.family);
        let whole = match &fixture.files {
            Files::One(bytes) => read(bytes.clone()),
            // The copy a cut is made in: the files listed are the whole checkpoint.
            Files::Several { open, files } => {
                let tmp = TempDir::new(&format!(
                    "robustness-whole-{}",
                    fixture.path.replace('/', "_")
                ));
                write_files(&tmp.0, files);
                open_in(&tmp.0, open)
            }
        };
        let path = &fixture.path;
        match (fixture.format, whole) {
            (Some(format), Ok(ckpt)) => {
                assert_eq!(ckpt.format, format, "{path}");
                formats.insert(format.name());
            }
            (Some(_), Err(e)) => panic!("{path}: {e}"),
            (None, Ok(ckpt)) => panic!("{path} read as {}", ckpt.format.name()),
            (None, Err(e)) => assert!(is_tar_refusal(&e), "{path}: {e}"),
        }
    }
    assert_eq!(families, BTreeSet::from(FAMILIES));
    let every: BTreeSet<&str> = every_format().into_iter().map(Format::name).collect();
    assert_eq!(formats, every);
}

/// Every cut of every other single file, from the `half`-th on, is refused as corrupt; two
/// tests sweep the two halves side by side. Returns how many files were swept.
fn sweep_cut_files(half: usize) -> usize {
    let mut swept = 0;
    for (salt, fixture) in fixtures().iter().enumerate().skip(half).step_by(2) {
        let Files::One(bytes) = &fixture.files else {
            continue;
        };
        for len in cut_lengths(bytes.len(), salt) {
            let e = read(bytes[..len].to_vec()).expect_err("a prefix");
            let path = &fixture.path;
            assert_eq!(e.kind(), ErrorKind::Corrupt, "{path}: {len} bytes: {e}");
        }
        swept += 1;
    }
    swept
}

#[test]
fn every_cut_file_is_refused_first_half() {
    let swept = sweep_cut_files(0);
    assert!(swept >= 25, "{swept} files swept");
}

#[test]
fn every_cut_file_is_refused_second_half() {
    let swept = sweep_cut_files(1);
    assert!(swept >= 25, "{swept} files swept");
}

/// Each file of a checkpoint read from several, cut in turn while the others stay whole:
/// a cut index or `.metadata` is refused as corrupt, and so is a cut shard; a cut `.distcp`
/// file is the metadata naming bytes the file lacks, an index mismatch (TP503, like the bad
/// fixture `truncated`), unless it is cut to nothing, which no reader opens. An index that
/// loses only its final newline is the same JSON, read as before. Cuts are sampled further
/// (every 13th length, and the last byte cut), each being a file written.
#[test]
fn every_cut_file_of_a_checkpoint_is_refused() {
    let mut swept = BTreeSet::new();
    for (salt, fixture) in fixtures().iter().enumerate() {
        let Files::Several { open, files } = &fixture.files else {
            continue;
        };
        let tmp = TempDir::new(&format!("robustness-cut-{salt}"));
        write_files(&tmp.0, files);
        let whole = open_in(&tmp.0, open).expect("whole");
        for (name, bytes) in files {
            // Every 13th length, and the whole file but its last byte.
            let lengths = cut_lengths(bytes.len(), salt)
                .enumerate()
                .filter(|&(i, n)| i.is_multiple_of(13) || n + 1 == bytes.len());
            for (_, len) in lengths {
                std::fs::write(tmp.0.join(name), &bytes[..len]).expect("cut");
                let what = format!("{} ({name} cut to {len} bytes)", fixture.path);
                let result = open_in(&tmp.0, open);
                if name == open && bytes[len..].iter().all(u8::is_ascii_whitespace) {
                    let ckpt = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(tensor_names(&ckpt), tensor_names(&whole), "{what}");
                    continue;
                }
                let e = result.expect_err(&what);
                // A refusal after pickles that name unsafe globals (a DCP bytes item holding
                // DTensors) carries them: the refusal itself is inside.
                let refusal = match &e {
                    Error::RefusedWithUnsafeGlobals { source, .. } => &**source,
                    other => other,
                };
                let outside_its_file = matches!(refusal, Error::DistributedMismatch { detail, .. }
                    if detail.contains("lies outside its file"));
                match fixture.family {
                    Family::Dcp if name.ends_with(".distcp") && len > 0 => {
                        assert!(outside_its_file, "{what}: {e}");
                        assert_eq!(refusal.kind(), ErrorKind::IndexMismatch, "{what}: {e}");
                    }
                    // A damaged shard is the shard's fault, named as such.
                    Family::ShardedIndex if name != open => {
                        assert!(matches!(e, Error::Shard { .. }), "{what}: {e}");
                        assert_eq!(e.kind(), ErrorKind::Corrupt, "{what}: {e}");
                    }
                    _ => assert_eq!(e.kind(), ErrorKind::Corrupt, "{what}: {e}"),
                }
                swept.insert((fixture.path.as_str(), name.as_str()));
            }
            std::fs::write(tmp.0.join(name), bytes).expect("restore");
        }
    }
    // Two indexes of three files; DCP directories of two (plain, zstd, nested_dtensor) and
    // three (chunked).
    assert_eq!(swept.len(), 15, "{swept:?}");
}

/// An accepted file may still hold views that reach outside their storage (a rule's finding,
/// not a reading error), but a consistent view always yields its bytes, and safetensors
/// files, whose layout is their header, are always consistent.
fn assert_consistent(ckpt: &Checkpoint) {
    for t in &ckpt.tensors {
        let imp = t.tensor_impl();
        let consistent = imp.is_data_ptr_consistent();
        if ckpt.format == Format::Safetensors {
            assert!(consistent, "{}", t.name());
        }
        let has_bytes = imp.storage().data_ptr().bytes().is_some();
        if consistent {
            assert_eq!(imp.view_bytes().is_some(), has_bytes, "{}", t.name());
        }
    }
    assert!(ckpt
        .storages
        .iter()
        .enumerate()
        .all(|(i, s)| s.id().index() == i));
}

fn single_files() -> Vec<&'static Vec<u8>> {
    fixtures()
        .iter()
        .filter_map(|f| match &f.files {
            Files::One(bytes) => Some(bytes),
            Files::Several { .. } => None,
        })
        .collect()
}

fn several_files() -> Vec<(&'static str, &'static [NamedFile])> {
    fixtures()
        .iter()
        .filter_map(|f| match &f.files {
            Files::One(_) => None,
            Files::Several { open, files } => Some((open.as_str(), files.as_slice())),
        })
        .collect()
}

fn flip(bytes: &mut [u8], flips: Vec<(prop::sample::Index, u8)>) {
    for (at, value) in flips {
        if !bytes.is_empty() {
            bytes[at.index(bytes.len())] = value;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn corrupted_files_are_refused_or_read_consistently(
        pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = pick.get(&single_files()).to_vec();
        flip(&mut bytes, flips);
        if let Ok(ckpt) = read(bytes) {
            assert_consistent(&ckpt);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut framed = (bytes.len() as u64).to_le_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        if let Ok(ckpt) = read(framed) {
            assert_consistent(&ckpt);
        }
        let _ = read(bytes);
    }
}

proptest! {
    // Each case writes a folder.
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// One file of an index or a DCP directory corrupted: refused, or read consistently.
    #[test]
    fn corrupted_checkpoints_of_several_files_are_refused_or_read_consistently(
        pick in any::<prop::sample::Index>(),
        file in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let (open, files) = *pick.get(&several_files());
        let mut files = files.to_vec();
        flip(&mut file.get_mut(&mut files).1, flips);
        let tmp = TempDir::new("robustness-corrupted");
        write_files(&tmp.0, &files);
        if let Ok(ckpt) = open_in(&tmp.0, open) {
            assert_consistent(&ckpt);
        }
    }
}

#[test]
fn a_buffer_shared_by_all_tensors_stays_alive_with_them() {
    let bytes =
        std::fs::read(root().join("fixtures/safetensors/basic.safetensors")).expect("fixture");
    let buffer = HostBuffer::from_vec("basic.safetensors", bytes);
    let ckpt = from_buffer(Arc::clone(&buffer)).expect("valid");
    // One buffer, one reference per storage plus ours: each tensor has its own Storage.
    assert_eq!(Arc::strong_count(&buffer), 1 + ckpt.storages.len());
    let tensors = ckpt.tensors.clone();
    drop(ckpt);
    assert!(tensors
        .iter()
        .all(|t| t.tensor_impl().view_bytes().is_some()));
}
