//! `tensorplay diff` and `audit --expect` against what torch and safetensors read from the
//! variants in fixtures/diff/ (truth.json, written by fixtures/make_diff.py): the expected
//! differences are derived from the libraries' own reading, never written by hand.

use crate::common::{read_json, root, stderr, stdout, tensorplay};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

type Truth = BTreeMap<String, Value>;

fn truth(file: &str) -> Truth {
    let all = read_json("fixtures/diff/truth.json");
    let tensors = all[file]["tensors"].as_object().expect(file);
    tensors
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn diff_json(args: &[&str]) -> (Value, Option<i32>) {
    let mut full = vec!["diff", "--format", "json"];
    full.extend_from_slice(args);
    let out = tensorplay(&full);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{args:?}: {}",
        stderr(&out)
    );
    (
        serde_json::from_str(&stdout(&out)).expect("diff JSON"),
        out.status.code(),
    )
}

fn names(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|e| e["name"].as_str().or(e.as_str()).expect("name").to_owned())
        .collect()
}

/// `(tensor, field, old, new)` for every field change tensorplay reports.
fn field_changes(v: &Value) -> BTreeSet<(String, String, String, String)> {
    v["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().expect(k).to_owned();
            (s("tensor"), s("field"), s("old"), s("new"))
        })
        .collect()
}

/// What the truth says changed, in tensorplay's words: dtype, shape (as `[a, b]`),
/// strides when shapes agree, and recorded device.
fn expected_changes(old: &Truth, new: &Truth) -> BTreeSet<(String, String, String, String)> {
    let dims = |v: &Value| {
        let d: Vec<String> = v
            .as_array()
            .expect("dims")
            .iter()
            .map(|x| x.to_string())
            .collect();
        format!("[{}]", d.join(", "))
    };
    let mut out = BTreeSet::new();
    for (name, a) in old {
        let Some(b) = new.get(name) else { continue };
        let mut push = |field: &str, x: String, y: String| {
            if x != y {
                out.insert((name.clone(), field.to_owned(), x, y));
            }
        };
        push(
            "dtype",
            a["dtype"].as_str().unwrap().into(),
            b["dtype"].as_str().unwrap().into(),
        );
        push("shape", dims(&a["shape"]), dims(&b["shape"]));
        if a["shape"] == b["shape"] {
            push("strides", dims(&a["strides"]), dims(&b["strides"]));
        }
        push(
            "device",
            a["device"].as_str().unwrap().into(),
            b["device"].as_str().unwrap().into(),
        );
    }
    out
}

fn check_against_truth(old: &str, new: &str) -> Value {
    let (a, b) = (truth(old), truth(new));
    let (got, _) = diff_json(&[
        "--values",
        &format!("fixtures/diff/{old}"),
        &format!("fixtures/diff/{new}"),
    ]);
    let only = |x: &Truth, y: &Truth| -> BTreeSet<String> {
        x.keys().filter(|k| !y.contains_key(*k)).cloned().collect()
    };
    let renamed_to: BTreeSet<String> = got["renamed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["to"].as_str().unwrap().to_owned())
        .collect();
    let renamed_from: BTreeSet<String> = got["renamed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["from"].as_str().unwrap().to_owned())
        .collect();
    let added: BTreeSet<String> = names(&got["added"]).union(&renamed_to).cloned().collect();
    let removed: BTreeSet<String> = names(&got["removed"])
        .union(&renamed_from)
        .cloned()
        .collect();
    assert_eq!(added, only(&b, &a), "{old} -> {new}: added");
    // A rename: a tensor only in one file whose dtype, shape and elements equal one only in
    // the other (first match in file order, as torch lists them).
    let renames: BTreeSet<(String, String)> = got["renamed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["from"].as_str().unwrap().to_owned(),
                r["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let same_tensor = |x: &Value, y: &Value| {
        x["dtype"] == y["dtype"] && x["shape"] == y["shape"] && x["sha256"] == y["sha256"]
    };
    for (from, to) in &renames {
        assert!(same_tensor(&a[from], &b[to]), "{from} -> {to}");
    }
    for from in only(&a, &b).difference(&renamed_from) {
        let twin = only(&b, &a)
            .into_iter()
            .find(|to| !renamed_to.contains(to) && same_tensor(&a[from], &b[to]));
        assert_eq!(twin, None, "{old} -> {new}: {from} has an unmatched twin");
    }
    assert_eq!(removed, only(&a, &b), "{old} -> {new}: removed");
    assert_eq!(
        field_changes(&got),
        expected_changes(&a, &b),
        "{old} -> {new}: changed"
    );
    // Ties: a tensor whose storage-mates differ.
    let ties: BTreeSet<String> = got["sharing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tensor"].as_str().unwrap().to_owned())
        .collect();
    let expected_ties: BTreeSet<String> = a
        .iter()
        .filter(|(n, t)| {
            b.get(*n)
                .is_some_and(|u| u["shares_with"] != t["shares_with"])
        })
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(ties, expected_ties, "{old} -> {new}: sharing");
    // Values: same dtype and shape, different element hashes.
    let values: BTreeMap<String, (String, String)> = got["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap().to_owned();
            (s("tensor"), (s("old_sha256"), s("new_sha256")))
        })
        .collect();
    let expected_values: BTreeMap<String, (String, String)> = a
        .iter()
        .filter_map(|(n, t)| {
            let u = b.get(n)?;
            let comparable = t["dtype"] == u["dtype"] && t["shape"] == u["shape"];
            (comparable && t["sha256"] != u["sha256"]).then(|| {
                let h = |x: &Value| x["sha256"].as_str().unwrap().to_owned();
                (n.clone(), (h(t), h(u)))
            })
        })
        .collect();
    assert_eq!(values, expected_values, "{old} -> {new}: values");
    assert_eq!(got["values_not_compared"], serde_json::json!([]));
    got
}

#[test]
fn each_variant_differs_from_the_base_as_the_libraries_read_it() {
    for variant in [
        "finetuned.pt",
        "half.pt",
        "quantized.pt",
        "tied.pt",
        "drifted.pt",
        "base.safetensors",
    ] {
        check_against_truth("base.pt", variant);
        check_against_truth(variant, "base.pt");
    }
    // The fine-tuned weights changed values only; the half copy only dtypes.
    let ft = check_against_truth("base.pt", "finetuned.pt");
    assert!(!ft["values"].as_array().unwrap().is_empty());
    assert!(ft["changed"].as_array().unwrap().is_empty());
    let tied = check_against_truth("base.pt", "tied.pt");
    assert_eq!(
        tied["sharing"][0]["new"],
        serde_json::json!(["lm_head.weight"])
    );
}

#[test]
fn a_checkpoint_and_its_safetensors_conversion_are_the_same_and_values_need_asking() {
    let (conv, code) = diff_json(&[
        "--values",
        "--fail-on-change",
        "fixtures/diff/base.pt",
        "fixtures/diff/base.safetensors",
    ]);
    assert_eq!(conv["same"], true, "{conv:#}");
    assert_eq!(code, Some(0));
    // Fine-tuning keeps the layout: the same without --values, different with it.
    let (meta, code) = diff_json(&[
        "--fail-on-change",
        "fixtures/diff/base.pt",
        "fixtures/diff/finetuned.pt",
    ]);
    assert_eq!((meta["same"].as_bool(), code), (Some(true), Some(0)));
    let (values, code) = diff_json(&[
        "--values",
        "--fail-on-change",
        "fixtures/diff/base.pt",
        "fixtures/diff/finetuned.pt",
    ]);
    assert_eq!((values["same"].as_bool(), code), (Some(false), Some(1)));
    for v in values["values"].as_array().unwrap() {
        let d = v["max_abs_difference"].as_f64().expect("float tensors");
        assert!(d > 0.0 && d < 1.0, "{v}");
    }
    // Without --fail-on-change a difference still exits 0.
    let (_, code) = diff_json(&["fixtures/diff/base.pt", "fixtures/diff/half.pt"]);
    assert_eq!(code, Some(0));
}

#[test]
fn a_renamed_tensor_is_found_by_its_content() {
    let got = check_against_truth("base.pt", "renamed.pt");
    assert_eq!(got["renamed"].as_array().map(Vec::len), Some(2), "{got:#}");
    assert_eq!(got["added"], serde_json::json!([]));
    assert_eq!(got["removed"], serde_json::json!([]));
}

#[test]
fn markdown_is_a_table_for_a_pull_request_comment() {
    let out = tensorplay(&[
        "diff",
        "--format",
        "markdown",
        "fixtures/diff/base.pt",
        "fixtures/diff/drifted.pt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = stdout(&out);
    assert!(
        md.starts_with("### tensorplay diff: fixtures/diff/drifted.pt\n"),
        "{md}"
    );
    assert!(md.contains("**different**"), "{md}");
    assert!(md.contains("| change | tensor | before | after |"), "{md}");
    assert!(
        md.contains("| removed | norm.bias | float32 \\[8\\] cpu |  |"),
        "{md}"
    );
    assert!(
        md.contains("| device | lm\\_head.weight | cpu | cuda:0 |"),
        "{md}"
    );
}

/// A side copied out of git into a temporary file (the base branch's version, in CI) is named
/// by its label in every format, never by the copy's path; an unreadable labelled side names
/// both.
#[test]
fn labels_name_the_sides_in_every_format() {
    let labels = [
        "--old-label",
        "main:checkpoints/model.pt",
        "--new-label",
        "checkpoints/model.pt",
    ];
    let mut args = vec!["diff", "--format", "markdown"];
    args.extend(labels);
    args.extend(["fixtures/diff/base.pt", "fixtures/diff/drifted.pt"]);
    let out = tensorplay(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = stdout(&out);
    assert!(
        md.starts_with("### tensorplay diff: checkpoints/model.pt\n"),
        "{md}"
    );
    assert!(
        md.contains("main:checkpoints/model.pt (pytorch-zip) → checkpoints/model.pt (pytorch-zip)"),
        "{md}"
    );
    assert!(!md.contains("fixtures/diff"), "{md}");

    let mut args = vec!["diff"];
    args.extend(labels);
    args.extend(["fixtures/diff/base.pt", "fixtures/diff/drifted.pt"]);
    let text = stdout(&tensorplay(&args));
    assert!(
        text.starts_with("old: main:checkpoints/model.pt ("),
        "{text}"
    );
    assert!(text.contains("\nnew: checkpoints/model.pt ("), "{text}");

    let (json, _) = diff_json(&[
        labels[0],
        labels[1],
        "fixtures/diff/base.pt",
        "fixtures/diff/drifted.pt",
    ]);
    assert_eq!(json["old"]["path"], "main:checkpoints/model.pt");
    assert_eq!(json["new"]["path"], "fixtures/diff/drifted.pt");

    let out = tensorplay(&[
        "diff",
        "--old-label",
        "main:checkpoints/model.pt",
        "fixtures/pytorch/bad/truncated.pt",
        "fixtures/diff/base.pt",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let error = stderr(&out);
    assert!(
        error.contains("main:checkpoints/model.pt: cannot be read: ")
            && error.contains("truncated.pt"),
        "{error}"
    );
}

#[test]
fn an_unreadable_side_is_an_error_not_a_difference() {
    let out = tensorplay(&[
        "diff",
        "fixtures/diff/base.pt",
        "fixtures/pytorch/bad/truncated.pt",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("truncated.pt"), "{}", stderr(&out));
}

fn tp601(args: &[&str]) -> Vec<(Vec<String>, String)> {
    let mut full = vec!["audit", "--format", "json", "--select", "TP601"];
    full.extend_from_slice(args);
    let out = tensorplay(&full);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).expect("report");
    report["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            let tensors = f["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect();
            (tensors, f["message"].as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn expect_reports_the_missing_key_the_changed_shape_and_the_moved_tensor() {
    let (base, drifted) = (truth("base.pt"), truth("drifted.pt"));
    // A layout file written by inspect, and the checkpoint itself, give the same verdict.
    let layout =
        std::env::temp_dir().join(format!("tensorplay-layout-{}.json", std::process::id()));
    let out = tensorplay(&["inspect", "--format", "layout", "fixtures/diff/base.pt"]);
    assert_eq!(out.status.code(), Some(0));
    std::fs::write(&layout, &out.stdout).expect("layout file");
    for expect in [layout.to_str().unwrap(), "fixtures/diff/base.pt"] {
        let found = tp601(&["--expect", expect, "fixtures/diff/drifted.pt"]);
        let flagged: BTreeSet<String> = found.iter().flat_map(|(t, _)| t.clone()).collect();
        let expected: BTreeSet<String> = base
            .iter()
            .filter(|(n, t)| {
                drifted.get(*n).is_none_or(|d| {
                    d["shape"] != t["shape"]
                        || d["dtype"] != t["dtype"]
                        || d["device"] != t["device"]
                })
            })
            .map(|(n, _)| n.clone())
            .collect();
        assert_eq!(flagged, expected, "{found:?}");
        assert_eq!(found.len(), 3, "{found:?}");
        let messages: Vec<&str> = found.iter().map(|(_, m)| m.as_str()).collect();
        assert!(
            messages.iter().any(|m| m.contains("missing: norm.bias")),
            "{messages:?}"
        );
        assert!(messages.contains(&"'block.weight': shape [8, 4], expected [8, 8]"));
        assert!(messages.contains(&"'lm_head.weight': on cuda:0, expected cpu"));
    }
    std::fs::remove_file(&layout).ok();
    // The conversion fits the layout it was converted from.
    assert_eq!(
        tp601(&[
            "--expect",
            "fixtures/diff/base.pt",
            "fixtures/diff/base.safetensors"
        ]),
        []
    );
}

#[test]
fn an_expect_file_that_is_neither_layout_nor_checkpoint_is_refused() {
    let bogus = root().join("tests/data/README.md");
    let out = tensorplay(&[
        "audit",
        "--expect",
        bogus.to_str().unwrap(),
        "fixtures/diff/base.pt",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--expect"), "{}", stderr(&out));
}
