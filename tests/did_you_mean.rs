//! An unknown rule name gets the closest rule wherever it is named: `--select`, `--ignore`,
//! `explain` and `tensorplay.toml`.

use crate::common::{stderr, tensorplay};

#[test]
fn selections_and_explain_suggest_the_closest_rule() {
    for flag in ["--select", "--ignore"] {
        let out = tensorplay(&["audit", flag, "TP10", "fixtures/pytorch/state_dict.pt"]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            stderr(&out),
            "error: unknown rule 'TP10' (did you mean TP101 view-overlap?)\n"
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
