use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(Unsigned {
    code: "TP801",
    name: "unsigned-model",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "provenance"],
    summary: "A model directory has no signature where --require-signature asks for one.",
    doc: "\
What it checks
  With `--require-signature`, that each model directory audited has its OpenSSF model
  signature: `model.sig` inside it, or the file `--signature` names.

Why it matters
  A deploy gate that enforces signatures must block a model nobody signed: an unsigned
  model has no producer that vouches for its bytes.

Example
  'models/llama has no signature: models/llama/model.sig does not exist'.

How to fix
  Sign the model with `model_signing sign` (key, certificate or Sigstore) and ship
  model.sig with it, or point `--signature` at the signature.",
    check: check,
    applies: per_directory,
});

/// Judged per model directory (`crate::provenance`), not per checkpoint.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}

/// Never run over a checkpoint: its findings are the signature's (`audit::signature_report`).
fn per_directory(_: &crate::options::Options) -> bool {
    false
}
