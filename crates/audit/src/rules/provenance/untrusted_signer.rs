use crate::finding::Draft;
use crate::rule::{declare_rule, Context};

declare_rule!(UntrustedSigner {
    code: "TP803",
    name: "untrusted-signer",
    severity: Error,
    reads_bytes: false,
    tags: ["security", "provenance"],
    summary: "A model signature verifies only with a key or certificate the given trust source does not vouch for.",
    doc: "\
What it checks
  That the signer is the one trusted, and nothing else: with `--public-key`, that the
  bundle's key hint is that key's and the signature verifies with it; with
  `--certificate-chain`, that the bundle's signing certificate chains, through the
  bundle's intermediates, to one of the given certificates, valid when it was issued,
  usable for code signing; with `--identity` and `--issuer`, that the Fulcio certificate
  chains to the Sigstore trusted root (embedded, or `--trust-root`), has a valid SCT and
  names exactly that identity and issuer. A bundle's own key or certificate is never
  trusted by itself.

Why it matters
  Anyone can sign a model with a key of their own: a signature proves provenance only
  when its signer is the one the gate expects.

Example
  'the model was signed by another key (key hint 3f…; the given key's is 9a…)'.

How to fix
  Verify with the key or CA of the model's producer, or have the model signed by it.",
    check: check,
    applies: per_directory,
});

/// Judged per model directory (`crate::provenance`), not per checkpoint.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}

/// Never run over a checkpoint: its findings are the signature's (`audit::signature_report`).
fn per_directory(_: &crate::options::Options) -> bool {
    false
}
