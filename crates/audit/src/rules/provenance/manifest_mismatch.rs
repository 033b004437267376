use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(ManifestMismatch {
    code: "TP804",
    name: "manifest-mismatch",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "provenance"],
    summary:
        "A file of a signed model differs from the signed manifest: changed, added or removed.",
    doc: "\
What it checks
  The model directory serialised again with the signed parameters (`files` or `shards`;
  sha256, blake2 or blake3; the signed `ignore_paths`, git paths and the signature itself
  left out; symbolic links only where the signature allows them), compared with the signed
  resources: one finding per file that is missing, not covered, or has another digest.

Why it matters
  A signature vouches for the bytes it lists: a changed weight, an added pickle or a
  removed file is a model nobody signed.

Example
  'models/llama: model.safetensors: changed since it was signed (sha256 94… signed,
  sha256 3c… now)'.

How to fix
  Restore the signed files, or sign the model again after a deliberate change.",
    check: check,
    applies: per_directory,
});

/// Judged per model directory (`crate::provenance`), not per checkpoint.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}

/// Never run over a checkpoint: its findings are the signature's (`audit::signature_report`).
fn per_directory(_: &crate::options::Options) -> bool {
    false
}
