//! Provenance (TP801–TP805): a model directory's OpenSSF model signature, verified with the
//! one trust source given (`crate::provenance`). The findings are made for the directory, not
//! for a checkpoint read, so every `check` here is empty; [`drafts`] maps an outcome to them.

mod invalid_signature;
mod manifest_mismatch;
mod signature_verified;
mod unsigned;
mod untrusted_signer;

pub use invalid_signature::InvalidSignature;
pub use manifest_mismatch::ManifestMismatch;
pub use signature_verified::SignatureVerified;
pub use unsigned::Unsigned;
pub use untrusted_signer::UntrustedSigner;

use crate::finding::Draft;
use crate::provenance::{Failure, Outcome, Signer, DIGESTS_HUB_LFS_OID};
use crate::Code;

/// At most this many files are named, one finding each; one more finding counts the rest.
const SHOWN: usize = 20;

/// The findings of one signature check: the rule's code and its draft.
pub fn drafts(outcome: &Outcome) -> Vec<(Code, Draft)> {
    let facts = &outcome.facts;
    let draft = |message: String, fix: &str| Draft {
        message,
        fix: fix.to_owned(),
        ..Default::default()
    };
    match &outcome.failure {
        None => {
            let signer = match &facts.signer {
                Some(Signer::Key { fingerprint }) => format!("the key {fingerprint}"),
                Some(Signer::Certificate { subject, .. }) => format!("the certificate '{subject}'"),
                Some(Signer::Identity { identity, issuer }) => {
                    format!("{identity} (issuer {issuer}, Sigstore)")
                }
                None => "an unnamed signer".to_owned(),
            };
            vec![(
                SignatureVerified::CODE,
                draft(
                    format!(
                        "{} is signed by {signer} ({} resources, root {}), and every file matches{}",
                        facts.model,
                        facts.resources.unwrap_or(0),
                        facts.root_digest.as_deref().unwrap_or("?"),
                        match facts.digests.as_deref() {
                            Some(DIGESTS_HUB_LFS_OID) => {
                                " (its LFS files by the SHA-256 the Hub lists for them, lfs.oid, \
                                 not fetched: this trusts the Hub's content addressing; --deep \
                                 hashes every byte)"
                            }
                            _ => "",
                        }
                    ),
                    "nothing to do",
                ),
            )]
        }
        Some(Failure::Unsigned(m)) => vec![(
            Unsigned::CODE,
            draft(
                m.clone(),
                "sign the model (`model_signing sign`) and ship model.sig beside it, or pass --signature",
            ),
        )],
        Some(Failure::Invalid(m)) => vec![(
            InvalidSignature::CODE,
            draft(
                m.clone(),
                "sign the model again; a bundle edited after signing never verifies",
            ),
        )],
        Some(Failure::Untrusted(m) | Failure::Unusable(m)) => vec![(
            UntrustedSigner::CODE,
            draft(
                m.clone(),
                "verify with the key, CA or identity of whoever should have signed it; never the bundle's own key",
            ),
        )],
        Some(Failure::Unreadable(m)) => vec![(
            ManifestMismatch::CODE,
            draft(format!("{}: {m}", facts.model), "make every file of the model readable"),
        )],
        Some(Failure::Mismatch(lines)) => {
            let fix = "restore the signed files, or sign the model again after a deliberate change";
            let mut out: Vec<(Code, Draft)> = lines
                .iter()
                .take(SHOWN)
                .map(|line| {
                    (
                        ManifestMismatch::CODE,
                        draft(format!("{}: {line}", facts.model), fix),
                    )
                })
                .collect();
            if lines.len() > SHOWN {
                out.push((
                    ManifestMismatch::CODE,
                    draft(
                        format!(
                            "{}: and {} more files differ from the signed manifest",
                            facts.model,
                            lines.len() - SHOWN
                        ),
                        fix,
                    ),
                ));
            }
            out
        }
    }
}
