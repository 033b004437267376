//! An unknown rule name gets the closest rule wherever it is named: `--select`, `--ignore`,
//! `explain` and `tensorplay.toml`. Selections also take code prefixes and names, as ruff's.

use crate::common::{stderr, tensorplay};

/// The codes of the findings of `audit --format json ARGS fixtures/torch215/dtensor.pt`
/// (eight TP501 globals) and `fixtures/pytorch/overlapping_params.pt` (view rules).
fn codes_selected(args: &[&str]) -> Vec<String> {
    let mut all = vec!["audit", "--format", "json"];
    all.extend_from_slice(args);
    all.extend([
        "fixtures/torch215/dtensor.pt",
        "fixtures/pytorch/overlapping_params.pt",
    ]);
    let out = tensorplay(&all);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let mut codes: Vec<String> = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .flat_map(|f| f["findings"].as_array().expect("findings").iter())
        .map(|f| f["code"].as_str().expect("code").to_owned())
        .collect();
    codes.sort();
    codes.dedup();
    codes
}

#[test]
fn selections_take_codes_prefixes_and_names() {
    let all = codes_selected(&[]);
    assert!(
        all.iter().any(|c| c.starts_with("TP1")) && all.iter().any(|c| c == "TP501"),
        "{all:?}"
    );
    let views: Vec<String> = all
        .iter()
        .filter(|c| c.starts_with("TP1"))
        .cloned()
        .collect();
    assert_eq!(codes_selected(&["--select", "TP1"]), views);
    assert_eq!(codes_selected(&["--select", "unsafe-global"]), ["TP501"]);
    assert_eq!(codes_selected(&["--select", "tp50,TP1"]), all);
    assert_eq!(codes_selected(&["--ignore", "TP1"]), ["TP501"]);
    assert_eq!(
        codes_selected(&["--select", "TP1", "--ignore", "grad-view"]),
        ["TP101", "TP106"]
    );
}

#[test]
fn selections_and_explain_suggest_the_closest_rule() {
    for flag in ["--select", "--ignore"] {
        let out = tensorplay(&["audit", flag, "TP109", "fixtures/pytorch/state_dict.pt"]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            stderr(&out),
            "error: unknown rule 'TP109' (did you mean TP101 view-overlap?)\n"
        );
        let out = tensorplay(&[
            "audit",
            flag,
            "unsafe-globl",
            "fixtures/pytorch/state_dict.pt",
        ]);
        assert_eq!(
            stderr(&out),
            "error: unknown rule 'unsafe-globl' (did you mean TP501 unsafe-global?)\n"
        );
    }
    let out = tensorplay(&["explain", "non-finit"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: unknown rule 'non-finit' (did you mean TP401 non-finite?)\n"
    );
}

#[test]
fn the_config_suggests_the_closest_rule_on_its_line() {
    let path = std::env::temp_dir().join(format!("tensorplay-dym-{}.toml", std::process::id()));
    std::fs::write(&path, "[rules]\n\"mixed-device\" = \"off\"\n").expect("temp config");
    let config = path.display().to_string();
    let out = tensorplay(&[
        "audit",
        "--config",
        &config,
        "fixtures/pytorch/state_dict.pt",
    ]);
    std::fs::remove_file(&path).ok();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.lines()
            .next()
            .is_some_and(|l| l
                .ends_with(":2: unknown rule 'mixed-device' (did you mean TP201 mixed-devices?)")),
        "{err}"
    );
}
