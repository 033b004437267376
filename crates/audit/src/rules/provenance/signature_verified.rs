use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(SignatureVerified {
    code: "TP805",
    name: "signature-verified",
    severity: Info,
    reads_bytes: false,
    tags: ["provenance"],
    summary: "A model directory's signature verified with the given trust source, and every file matches it.",
    doc: "\
What it checks
  Reports, for the record, a signature that verified with the trust source given and a
  model directory whose every file matches the signed manifest; it names the signer (a
  key's fingerprint or a certificate's subject) and the signed root digest.

Why it matters
  An audit log that says who signed what a deploy shipped answers the provenance
  question later without running the verification again.

Example
  'models/llama is signed by the key sha256:5e… (3 resources, root sha256:a9…), and every
  file matches'.

How to fix
  Nothing: this is information.",
    check: check,
    applies: per_directory,
});

/// Judged per model directory (`crate::provenance`), not per checkpoint.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}

/// Never run over a checkpoint: its findings are the signature's (`audit::signature_report`).
fn per_directory(_: &crate::options::Options) -> bool {
    false
}
