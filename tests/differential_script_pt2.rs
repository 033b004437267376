//! TorchScript and `torch.export` archives that tensorplay once read differently from torch
//! (`fixtures/hostile/make_differential_script_pt2.py`): code members in another case, a
//! `def` spaced by the lexer's rarer blanks, Python where torch sympifies an expression, decoy
//! names that once chose the layout, protocol-0 pickles torch.load would run. Each truth file
//! records what torch really read or evaluated; each verdict is checked here.

use crate::common::{error_findings, read_json, stderr, stdout, tensorplay};
use serde_json::Value;

const TRUTHS: [&str; 2] = [
    "fixtures/hostile/differential/torchscript/truth.json",
    "fixtures/hostile/differential/pt2/truth.json",
];

/// Every fixture: its path, torch's recorded reading and tensorplay's expected verdict.
fn fixtures() -> Vec<(String, Value, Value)> {
    let mut out = Vec::new();
    for truth in TRUTHS {
        let doc = read_json(truth);
        assert_eq!(doc["torch_version"], "2.9.1", "{truth}");
        for (path, entry) in doc["files"].as_object().expect("files") {
            out.push((
                path.clone(),
                entry["torch"].clone(),
                entry["tensorplay"]["error"].clone(),
            ));
        }
    }
    assert_eq!(
        out.len(),
        16,
        "seven TorchScript archives, nine torch.export ones"
    );
    out
}

/// The error findings of an audit that never fails, as (code, message).
fn errors(path: &str) -> Vec<(String, String)> {
    let out = tensorplay(&["audit", "--format", "json", "--fail-on", "never", path]);
    assert_eq!(out.status.code(), Some(0), "{path}: {}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).expect("JSON report");
    error_findings(&report).concat()
}

/// Each hostile archive gets its error finding, naming what torch would run; each real one
/// gets none; and the gate fails exactly where there is an error.
#[test]
fn each_archive_gets_the_verdict_torchs_reading_calls_for() {
    for (path, _, expected) in fixtures() {
        let found = errors(&path);
        match expected.as_object() {
            None => assert!(found.is_empty(), "{path}: {found:?}"),
            Some(expected) => {
                let code = expected["code"].as_str().expect("code");
                let text = expected["message_contains"].as_str().expect("text");
                assert!(
                    found.iter().any(|(c, m)| c == code && m.contains(text)),
                    "{path}: no {code} containing {text:?} in {found:?}"
                );
            }
        }
        let gate = tensorplay(&["audit", &path]);
        let failing = if expected.is_null() { 0 } else { 1 };
        assert_eq!(
            gate.status.code(),
            Some(failing),
            "{path}: {}",
            stderr(&gate)
        );
    }
}

/// The verdicts rest on what torch did: every archive flagged for `__setstate__` ran it in
/// `torch.jit.load`; every one flagged for an expression had that string sympified; every one
/// flagged for a pickled payload had a member other than the example inputs handed to
/// `torch.load`, and the one flagged for its example inputs had them handed to `torch.load`
/// after a refused constant; the real archives ran nothing of the kind.
#[test]
fn the_verdicts_match_what_torch_recorded() {
    for (path, torch, expected) in fixtures() {
        let code = expected["code"].as_str().unwrap_or_default();
        let text = expected["message_contains"].as_str().unwrap_or_default();
        if path.ends_with(".pt") {
            let ran = torch["jit_load"]["setstate_ran"] == true;
            let exact = torch["torch_load_sees_torchscript"] == true;
            match code {
                "TP504" => assert!(ran && exact, "{path}: {torch}"),
                // Ambiguous: torch.jit.load runs the code, torch.load does not see it.
                "TP502" => assert!(ran && !exact, "{path}: {torch}"),
                _ => assert!(!ran, "{path}: {torch}"),
            }
            let members = torch["code_members_found_ignoring_case"].as_array();
            assert!(members.is_some_and(|m| !m.is_empty()), "{path}: {torch}");
            continue;
        }
        let evaluated = torch["non_grammar_sympified"].as_array().expect("list");
        let pickled: Vec<&str> = torch["torch_load_members"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(Value::as_str)
            .filter(|m| {
                !m.to_ascii_lowercase().ends_with("sample_inputs/model.pt")
                    && !m.starts_with("serialized_")
                    && *m != "<not a member>"
            })
            .collect();
        match (code, text) {
            ("TP501", "sympy.sympify") => assert!(!evaluated.is_empty(), "{path}: {torch}"),
            // The flat layout hands its state dict to torch.load whatever its bytes are.
            ("TP502", "builtins.print") if path.contains("flat_") => {
                let loaded = torch["torch_load_members"].as_array().expect("list");
                assert!(
                    loaded.contains(&"serialized_state_dict.pt".into()),
                    "{path}: {torch}"
                );
            }
            ("TP502", "builtins.print") => {
                assert_eq!(pickled.len(), 1, "{path}: {torch}");
            }
            // Refused for a pickled constant, yet torch.load reaches the example inputs too.
            ("TP501", "posix.system") => {
                let loaded = torch["torch_load_members"].as_array().expect("list");
                assert_eq!(pickled.len(), 1, "{path}: {torch}");
                assert!(
                    loaded.iter().any(|m| m.as_str().is_some_and(|m| m
                        .to_ascii_lowercase()
                        .ends_with("sample_inputs/model.pt"))),
                    "{path}: {torch}"
                );
            }
            _ => assert!(
                evaluated.is_empty() && pickled.is_empty(),
                "{path}: {torch}"
            ),
        }
    }
}

/// `inspect` lists an evaluated string as a global, naming the member, the field and the
/// string, at the string's byte offset in the member.
#[test]
fn inspect_names_the_member_and_field_of_an_evaluated_string() {
    let path = "fixtures/hostile/differential/pt2/expr_payload.pt2";
    let out = tensorplay(&["inspect", "--format", "json", path]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let globals = doc["unsafe_globals"].as_array().expect("globals");
    assert_eq!(globals.len(), 1, "{globals:?}");
    let g = &globals[0];
    assert_eq!(
        (&g["module"], &g["name"]),
        (&"sympy".into(), &"sympify".into())
    );
    let member = g["member"].as_str().expect("member");
    assert!(
        member.starts_with("archive/models/model.json: graph_module.graph.sym_int_values.")
            && member.contains(".as_expr.expr_str \"__import__('builtins').print(")
            && member.ends_with("(calls '__import__', which torch never writes)"),
        "{member}"
    );
    assert!(g["position"].as_u64().is_some_and(|p| p > 0), "{g}");
}
