//! Hostile bytes never panic a reader: every truncation of every good single-file fixture
//! (safetensors, PyTorch zip, legacy, TorchScript) is refused, and random corruptions are
//! either refused or read consistently.

use crate::common::{good_truth_files, read_json, root};
use proptest::prelude::*;
use std::sync::Arc;
use tensorplay_engine::load::from_buffer;
use tensorplay_engine::{ErrorKind, HostBuffer};

fn single_file_fixtures() -> Vec<Vec<u8>> {
    good_truth_files()
        .iter()
        .map(|t| read_json(t))
        .filter(|t| {
            !t["inspect"]["format"]
                .as_str()
                .expect("format")
                .ends_with("-index")
        })
        .map(|t| {
            let path = t["inspect"]["path"].as_str().expect("path").to_owned();
            std::fs::read(root().join(path)).expect("fixture")
        })
        .collect()
}

fn read(bytes: Vec<u8>) -> tensorplay_engine::Result<tensorplay_engine::Checkpoint> {
    from_buffer(HostBuffer::from_vec("mutated", bytes))
}

#[test]
fn every_truncation_is_refused() {
    let fixtures = single_file_fixtures();
    assert!(fixtures.len() >= 5);
    for bytes in fixtures {
        for len in 0..bytes.len() {
            let prefix = bytes.get(..len).expect("prefix").to_vec();
            let e = read(prefix).expect_err("a prefix");
            assert_eq!(e.kind(), ErrorKind::Corrupt, "a {len}-byte prefix: {e}");
        }
        assert!(read(bytes).is_ok());
    }
}

/// An accepted file may still hold views that reach outside their storage (a rule's finding,
/// not a reading error), but a consistent view always yields its bytes, and safetensors
/// files, whose layout is their header, are always consistent.
fn assert_consistent(ckpt: &tensorplay_engine::Checkpoint) {
    for t in &ckpt.tensors {
        let imp = t.tensor_impl();
        let consistent = imp.verify_data_ptr_consistency(t.name()).is_ok();
        if ckpt.format == tensorplay_engine::Format::Safetensors {
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn corrupted_files_are_refused_or_read_consistently(
        pick in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let fixtures = single_file_fixtures();
        let mut bytes = pick.get(&fixtures).clone();
        for (at, value) in flips {
            let i = at.index(bytes.len());
            if let Some(b) = bytes.get_mut(i) {
                *b = value;
            }
        }
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

/// The families whose truth files are one per folder (`.pt2` archives, tensor kinds, DCP
/// directories): every cut of a file is refused as corrupt. Prefixes are sampled past the
/// first 512 bytes (every 7th length), so the sweep stays fast.
#[test]
fn every_family_is_refused_when_cut() {
    let lengths = |len: usize| (0..len).filter(|&n| n < 512 || n % 7 == 0);
    let mut files = 0;
    for dir in ["fixtures/pt2", "fixtures/pytorch/kinds"] {
        for entry in std::fs::read_dir(root().join(dir))
            .expect("fixture dir")
            .flatten()
        {
            let path = entry.path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // Read whole, a good file; the one bad kind is refused whole already.
            if !(name.ends_with(".pt2") || name.ends_with(".pt")) || name.contains("out_of_bounds")
            {
                continue;
            }
            let bytes = std::fs::read(&path).expect("fixture");
            assert!(read(bytes.clone()).is_ok(), "{name}");
            for len in lengths(bytes.len()) {
                let e = read(bytes[..len].to_vec()).expect_err("a prefix");
                assert_eq!(e.kind(), ErrorKind::Corrupt, "{name}: {len} bytes: {e}");
            }
            files += 1;
        }
    }
    assert!(files >= 20, "{files} files swept");
    // A DCP directory whose `.metadata` or `.distcp` file is cut.
    for dir in ["fixtures/dcp/plain", "fixtures/dcp/chunked"] {
        let src = root().join(dir);
        let names: Vec<String> = std::fs::read_dir(&src)
            .expect("dcp dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        for cut in &names {
            let whole = std::fs::read(src.join(cut)).expect("file");
            for len in lengths(whole.len()).step_by(13) {
                let tmp = std::env::temp_dir().join(format!(
                    "tensorplay-cut-{}-{}-{cut}-{len}",
                    std::process::id(),
                    dir.replace('/', "_")
                ));
                std::fs::create_dir_all(&tmp).expect("temp dir");
                for name in &names {
                    let bytes = std::fs::read(src.join(name)).expect("file");
                    let bytes = if name == cut {
                        bytes[..len].to_vec()
                    } else {
                        bytes
                    };
                    std::fs::write(tmp.join(name), bytes).expect("write");
                }
                let e = tensorplay_engine::load::open(&tmp).expect_err("a cut file");
                assert!(
                    matches!(e.kind(), ErrorKind::Corrupt | ErrorKind::IndexMismatch),
                    "{dir}/{cut} cut to {len}: {e}"
                );
                std::fs::remove_dir_all(&tmp).ok();
            }
        }
    }
}
