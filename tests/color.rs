//! `--color auto|always|never` and the variables `auto` honours: the flag beats the
//! environment, `NO_COLOR` beats `FORCE_COLOR`, and a pipe gets no colour unless forced.

use crate::common::{root, stdout};
use std::process::{Command, Output};

const VARIABLES: [&str; 4] = ["NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "CLICOLOR"];

/// Audits a fixture with stdout a pipe, only the given colour variables set.
fn audit(color: &str, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tensorplay"));
    command
        .args(["audit", "--color", color, "fixtures/pytorch/multi_gpu.pt"])
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    for name in VARIABLES {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command.output().expect("tensorplay runs")
}

/// `--color` value, variables set, whether stdout is painted.
type Case = (&'static str, &'static [(&'static str, &'static str)], bool);

fn painted(out: &Output) -> bool {
    stdout(out).contains('\x1b')
}

#[test]
fn the_flag_and_the_environment_decide_colour() {
    let cases: &[Case] = &[
        ("auto", &[], false),
        ("auto", &[("FORCE_COLOR", "1")], true),
        ("auto", &[("FORCE_COLOR", "0")], false),
        ("auto", &[("CLICOLOR_FORCE", "1")], true),
        ("auto", &[("FORCE_COLOR", "1"), ("NO_COLOR", "1")], false),
        ("auto", &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")], false),
        ("always", &[], true),
        ("always", &[("NO_COLOR", "1")], true),
        ("never", &[("FORCE_COLOR", "1")], false),
    ];
    for (flag, env, expected) in cases {
        let out = audit(flag, env);
        assert_eq!(out.status.code(), Some(1), "{flag} {env:?}");
        assert_eq!(painted(&out), *expected, "--color {flag} with {env:?}");
    }
}

#[test]
fn colour_paints_words_and_changes_nothing_else() {
    let plain = stdout(&audit("never", &[]));
    let coloured = stdout(&audit("always", &[]));
    assert!(coloured.contains("error\x1b[0m[TP201]"), "{coloured}");
    let stripped: String = strip_escapes(&coloured);
    assert_eq!(stripped, plain);
}

/// The text without ANSI SGR sequences (`ESC [ … m`).
fn strip_escapes(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
