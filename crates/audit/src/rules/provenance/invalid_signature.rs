use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(InvalidSignature {
    code: "TP802",
    name: "invalid-signature",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "provenance"],
    summary: "A model signature is malformed, or its DSSE signature does not cover its statement.",
    doc: "\
What it checks
  The signature is a Sigstore bundle whose DSSE envelope verifies over
  PAE(payloadType, payload) with the signer's key, and whose payload is an in-toto
  statement of predicate type `https://model_signing/signature/v1.0` (or v0.2's
  `https://model_signing/Digests/v0.1`) with exactly one subject, whose root digest is
  SHA-256 over the resources' digests in their listed order. For a keyless signature, also
  the Rekor entry (inclusion proof or promise) or the RFC 3161 timestamp, under the
  Sigstore trusted root.

Why it matters
  A bundle edited after signing (a digest changed so that a tampered file passes) no
  longer verifies: its statement cannot be trusted for any file.

Example
  'the DSSE signature does not verify over the bundle's payload with the signer's key'.

How to fix
  Sign the model again from its trusted source.",
    check: check,
    applies: per_directory,
});

/// Judged per model directory (`crate::provenance`), not per checkpoint.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}

/// Never run over a checkpoint: its findings are the signature's (`audit::signature_report`).
fn per_directory(_: &crate::options::Options) -> bool {
    false
}
