//! Every bad fixture gives one clear line on stderr naming the file and what is wrong, exit 2,
//! and nothing on stdout.

use crate::common::{read_json, stderr, stdout, tensorplay};

/// Each bad fixture and the words its error must carry.
const EXPECTED: &[(&str, &str)] = &[
    ("safetensors/bad/bad_json.safetensors", "header: invalid JSON: EOF while parsing an object at line 1 column 112"),
    ("safetensors/bad/duplicate_name.safetensors", "header: tensor 'a' is declared more than once"),
    ("safetensors/bad/empty.safetensors", "empty file"),
    ("safetensors/bad/f4_odd_last_dim.safetensors", "tensor 'f4': F4 shape [2, 3]: torch reads F4 as float4_e2m1fn_x2, two values a byte, and needs the last dimension to be even"),
    ("safetensors/bad/gap.safetensors", "tensor 'b': data_offsets start at 24 but the previous tensor ends at 16: a gap of 8 bytes"),
    ("safetensors/bad/header_beyond_file.safetensors", "header: declared length 216 bytes runs past the end of the 152-byte file"),
    ("safetensors/bad/header_too_large.safetensors", "header: declared length 200000000 bytes exceeds the 100000000-byte limit"),
    ("safetensors/bad/leading_space.safetensors", "header: must begin with '{' but begins with ' '"),
    ("safetensors/bad/not_utf8.safetensors", "header: invalid UTF-8 at header byte"),
    ("safetensors/bad/offset_overflow.safetensors", "tensor 'b': data_offsets start at 18446744073709551599"),
    ("safetensors/bad/overlap.safetensors", "tensor 'b': data_offsets [8, 24] overlap tensor 'a', which ends at 16"),
    ("safetensors/bad/size_mismatch.safetensors", "tensor 'a': dtype float32 × shape [2, 2] = 16 bytes, but data_offsets [0, 12] span 12"),
    ("safetensors/bad/tiny.safetensors", "not a checkpoint tensorplay can read (first bytes: 70 00 00 00 00)"),
    ("safetensors/bad/trailing_bytes.safetensors", "data: tensors end at byte 152 but the file has 160 bytes (trailing bytes after the last tensor)"),
    ("safetensors/bad/truncated.safetensors", "data: tensors end at byte 152 but the file has 140 bytes (file is truncated)"),
    ("safetensors/bad/unknown_dtype.safetensors", "tensor 'b': unknown dtype 'F128'"),
    ("safetensors/bad/unknown_field.safetensors", "tensor 'a': unknown field `extra`"),
    ("safetensors/bad/random.bin", "not a checkpoint tensorplay can read (first bytes: 78 4d da a2"),
    ("safetensors/bad/index_bad_json/model.safetensors.index.json", "index: invalid JSON"),
    ("safetensors/bad/index_missing_shard/model.safetensors.index.json", "shard fixtures/safetensors/bad/index_missing_shard/model-00002-of-00002.safetensors: cannot read: No such file or directory"),
    ("safetensors/bad/index_path_escape/model.safetensors.index.json", "weight_map: shard path '../../basic.safetensors' must be a plain file name beside the index"),
    ("safetensors/bad/index_tensor_absent/model.safetensors.index.json", "weight_map: tensor 'model.layers.2.mlp.weight' is mapped to 'model-00001-of-00002.safetensors' but that shard does not hold it"),
    ("safetensors/bad/index_tensor_in_two_shards/model.safetensors.index.json", "shards: tensor 'model.embed_tokens.weight' is held by both 'model-00001-of-00002.safetensors' and 'model-00002-of-00002.safetensors'"),
    ("safetensors/bad/index_unlisted_tensor/model.safetensors.index.json", "weight_map: shard 'model-00002-of-00002.safetensors' holds tensor 'model.unlisted.weight', which the index does not list"),
    ("pytorch/bad/not_a_checkpoint.pt", "zip: first entry 'readme.txt' is not inside a folder"),
    ("pytorch/bad/truncated.pt", "zip: unreadable archive, truncated or damaged"),
    ("pytorch/bad/zip_without_data_pkl.pt", "zip: no zip_without_data_pkl/data.pkl: not a PyTorch archive"),
    ("pytorch/bad/record_size_mismatch.pt", "record_size_mismatch/data/0: record holds 52 bytes but the pickle describes 48 (12 float32)"),
    ("pytorch/bad/index_broken/pytorch_model.bin.index.json", "weight_map: tensor '2.bias' is mapped to 'pytorch_model-00001-of-00002.bin' but that shard does not hold it"),
];

fn check_one_line_error(path: &str, expected: &str) {
    for format in ["text", "json"] {
        let out = tensorplay(&["inspect", "--format", format, path]);
        assert_eq!(out.status.code(), Some(2), "{path}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{path}: printed {}", stdout(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{path}: not one line: {err}");
        let prefix = format!("error: {path}: ");
        assert!(err.starts_with(&prefix), "{path}: {err}");
        assert!(
            err.contains(expected),
            "{path}: expected '{expected}' in {err}"
        );
        assert!(!err.contains("panicked"), "{path}: {err}");
    }
}

#[test]
fn every_bad_fixture_gives_its_clear_error() {
    for (relative, expected) in EXPECTED {
        check_one_line_error(&format!("fixtures/{relative}"), expected);
    }
}

/// The truth files record what the real libraries make of each bad fixture. tensorplay
/// rejects every one, including those the safetensors library accepts where its spec does
/// not (duplicate names, unknown fields, text before the brace) and a storage record longer
/// than its pickle says, whose extra bytes torch ignores.
#[test]
fn every_bad_fixture_in_the_truth_is_covered_and_the_library_agrees_where_it_rejects() {
    let covered: Vec<String> = EXPECTED
        .iter()
        .map(|(p, _)| format!("fixtures/{p}"))
        .collect();
    let mut accepted = Vec::new();
    for (truth_file, verdict) in [
        ("fixtures/safetensors/bad/truth.json", "library_accepts"),
        ("fixtures/pytorch/bad/truth.json", "torch_accepts"),
    ] {
        let truth = read_json(truth_file);
        for (key, value) in truth.as_object().expect("an object per bad fixture") {
            assert!(covered.contains(key), "{key} has no expected error here");
            if value[verdict] == true {
                accepted.push(key.clone());
            }
        }
    }
    assert_eq!(
        accepted,
        [
            "fixtures/safetensors/bad/duplicate_name.safetensors",
            "fixtures/safetensors/bad/leading_space.safetensors",
            "fixtures/safetensors/bad/unknown_field.safetensors",
            "fixtures/pytorch/bad/record_size_mismatch.pt",
        ],
        "the libraries' leniencies changed; review the stricter rules"
    );
}

#[test]
fn missing_paths_directories_and_other_files_are_one_line_errors() {
    check_one_line_error(
        "fixtures/does-not-exist.safetensors",
        "cannot read: No such file or directory",
    );
    check_one_line_error("fixtures", "cannot read");
    check_one_line_error("fixtures/make.sh", "not a checkpoint tensorplay can read");
}

#[test]
fn usage_errors_exit_2() {
    let out = tensorplay(&["inspect"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("Usage"), "{}", stderr(&out));
    let out = tensorplay(&[
        "inspect",
        "--format",
        "xml",
        "fixtures/safetensors/basic.safetensors",
    ]);
    assert_eq!(out.status.code(), Some(2));
}
