//! A finding's identity across runs, which baselines record, and its fingerprint: the hash of
//! that identity, which SARIF and GitLab carry, so a finding a baseline knows is the same
//! issue to GitHub and GitLab.

use crate::text::comparable_path;
use crate::{Code, Finding};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// What identifies a finding across runs: file, rule, tensors, and for findings that name
/// no tensor, the message (counts inside messages are not part of a tensor finding's identity).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// Checkpoint path.
    pub path: String,
    /// Rule code.
    pub code: Code,
    /// Tensor names, sorted.
    pub tensors: Vec<String>,
    /// The message, for findings without tensors; empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The hash of the payload the finding is about (TP501's pickle, TP504's code), if any:
    /// a changed payload is a new finding.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub payload: String,
}

impl Fingerprint {
    /// The identity of `finding` in the file at `path` (however it is spelled: `./x`, `x`,
    /// absolute inside the working directory).
    pub fn of(path: &str, finding: &Finding) -> Fingerprint {
        let mut tensors = finding.tensors.clone();
        tensors.sort();
        Fingerprint {
            path: comparable_path(path),
            code: finding.code,
            message: if tensors.is_empty() {
                finding.message.clone()
            } else {
                String::new()
            },
            tensors,
            payload: finding.payload.clone(),
        }
    }
}

/// Fingerprints made unique within one report: hex SHA-256 of the identity
/// `[path, code, sorted tensors, message or ""(, payload hash)]`, and for a repeat of an identity (two findings
/// a baseline cannot tell apart, such as TP102 on `a, b` and on `b, a`) the hash of it and its
/// occurrence number: code scanning and GitLab keep one issue per fingerprint.
#[derive(Default)]
pub(crate) struct Unique {
    seen: HashMap<String, usize>,
}

impl Unique {
    pub(crate) fn next(&mut self, path: &str, finding: &Finding) -> String {
        let Fingerprint {
            path,
            code,
            tensors,
            message,
            payload,
        } = Fingerprint::of(path, finding);
        // A JSON array, not the struct: its order is fixed whatever serde's map order. A
        // payload's hash joins it (a dismissed alert comes back when the payload changes).
        let identity = if payload.is_empty() {
            serde_json::to_string(&(path, code, tensors, message))
        } else {
            serde_json::to_string(&(path, code, tensors, message, payload))
        }
        .unwrap_or_default();
        let id = hex(&Sha256::digest(identity.as_bytes()));
        let count = self.seen.entry(id.clone()).or_insert(0);
        *count += 1;
        if *count == 1 {
            id
        } else {
            hex(&Sha256::digest(format!("{id}#{count}").as_bytes()))
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
