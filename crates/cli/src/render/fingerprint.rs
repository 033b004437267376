//! A finding's stable identity for CI servers that track issues across runs (SARIF
//! `partialFingerprints`, GitLab `fingerprint`): the hash of the identity baselines use, so a
//! finding a baseline knows is the same issue to GitHub and GitLab.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use tensorplay_audit::baseline::Fingerprint;
use tensorplay_audit::Finding;

/// The key SARIF files the hash under; the version changes if the identity ever does.
pub const SARIF_KEY: &str = "tensorplay/v1";

/// Hex SHA-256 of `[path, code, sorted tensors, message or ""]`: the baseline identity of
/// `finding` in `path`.
pub fn identity(path: &str, finding: &Finding) -> String {
    let Fingerprint {
        path,
        code,
        tensors,
        message,
    } = Fingerprint::of(path, finding);
    // A JSON array, not the struct: its order is fixed whatever serde's map order.
    let text = serde_json::to_string(&(path, code, tensors, message)).unwrap_or_default();
    hex(&Sha256::digest(text.as_bytes()))
}

/// Identities made unique within one report: a repeat of an identity (two findings a
/// baseline cannot tell apart, such as TP102 on `a, b` and on `b, a`) gets its occurrence
/// number hashed in, because GitLab keeps only one issue per fingerprint.
#[derive(Default)]
pub struct Unique {
    seen: HashMap<String, usize>,
}

impl Unique {
    /// The identity of `finding`, or for its n-th repeat (n ≥ 2) the hash of identity and n.
    pub fn next(&mut self, path: &str, finding: &Finding) -> String {
        let id = identity(path, finding);
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
