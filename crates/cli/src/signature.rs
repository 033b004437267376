//! `audit --require-signature` and its trust source: each model directory's OpenSSF model
//! signature verified (`tensorplay_audit::provenance`), and `--emit-oms-manifest`.

use anyhow::Context as _;
use clap::Args;
use std::path::{Path, PathBuf};
use tensorplay_audit::provenance::{self, Outcome, Request, Trust};

#[derive(Debug, Args)]
pub struct SignatureArgs {
    /// Fail every model directory without a valid OpenSSF model signature (TP801–TP804) from
    /// the one trust source given (--public-key, --certificate-chain, or --identity with
    /// --issuer).
    #[arg(long)]
    require_signature: bool,
    /// Trust signatures made by this EC public key (PEM); the bundle's key hint must be its.
    #[arg(long, value_name = "PEM", conflicts_with = "certificate_chain")]
    public_key: Option<PathBuf>,
    /// Trust signing certificates that chain to these certificates (PEM), a private PKI.
    #[arg(long, value_name = "PEM")]
    certificate_chain: Option<PathBuf>,
    /// Trust keyless (Sigstore) signatures whose certificate names this identity (an email
    /// or URI, exactly); needs --issuer. Verified offline against the production Sigstore
    /// trusted root embedded in tensorplay, or --trust-root.
    #[arg(long, value_name = "ID", requires = "issuer", conflicts_with_all = ["public_key", "certificate_chain"])]
    identity: Option<String>,
    /// The OIDC issuer the keyless signer's certificate must record (with --identity).
    #[arg(long, value_name = "URL", requires = "identity")]
    issuer: Option<String>,
    /// A private Sigstore's trusted root (JSON, as `cosign` and `sigstore` read it) for
    /// --identity, instead of the embedded production root.
    #[arg(long, value_name = "FILE", requires = "identity")]
    trust_root: Option<PathBuf>,
    /// The signature to verify [default: model.sig in the model directory]; with one
    /// directory only.
    #[arg(long, value_name = "PATH")]
    signature: Option<PathBuf>,
    /// Write the unsigned OMS manifest of the model directory (files, sha256) to FILE: the
    /// statement `model_signing sign` wraps.
    #[arg(long, value_name = "FILE")]
    emit_oms_manifest: Option<PathBuf>,
}

impl SignatureArgs {
    /// Whether any signature flag was given.
    pub fn any(&self) -> bool {
        self.require_signature
            || self.public_key.is_some()
            || self.certificate_chain.is_some()
            || self.identity.is_some()
            || self.signature.is_some()
            || self.emit_oms_manifest.is_some()
    }

    /// The trust source, if one was given.
    fn trust(&self) -> anyhow::Result<Option<Trust>> {
        let read = |path: &Path| {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        };
        if let (Some(identity), Some(issuer)) = (&self.identity, &self.issuer) {
            let trusted_root = match &self.trust_root {
                Some(path) => Some(
                    String::from_utf8(read(path)?)
                        .with_context(|| format!("{} is not UTF-8", path.display()))?,
                ),
                None => None,
            };
            return Ok(Some(Trust::Keyless(provenance::keyless::Keyless {
                identity: identity.clone(),
                issuer: issuer.clone(),
                trusted_root,
            })));
        }
        Ok(match (&self.public_key, &self.certificate_chain) {
            (Some(key), None) => Some(Trust::PublicKey(read(key)?)),
            (None, Some(chain)) => Some(Trust::CertificateChain(read(chain)?)),
            (None, None) => None,
            (Some(_), Some(_)) => {
                anyhow::bail!("--public-key and --certificate-chain: give exactly one trust source")
            }
        })
    }

    /// Each model directory among `paths` checked: `Ok(vec![])` when no signature flag was
    /// given. A directory without a signature is reported only under --require-signature.
    pub fn check(&self, paths: &[PathBuf]) -> anyhow::Result<Vec<Outcome>> {
        let trust = self.trust()?;
        if let Some(out) = &self.emit_oms_manifest {
            let [dir] = paths else {
                anyhow::bail!("--emit-oms-manifest: give exactly one model directory");
            };
            let manifest = provenance::unsigned_manifest(dir)
                .map_err(|e| anyhow::anyhow!("--emit-oms-manifest {}: {e}", dir.display()))?;
            let text = serde_json::to_string_pretty(&manifest)? + "\n";
            std::fs::write(out, text).with_context(|| format!("cannot write {}", out.display()))?;
        }
        let Some(trust) = trust else {
            if self.require_signature {
                anyhow::bail!(
                    "--require-signature needs exactly one trust source: --public-key PEM, --certificate-chain PEM, or --identity ID --issuer URL"
                );
            }
            if self.signature.is_some() {
                anyhow::bail!(
                    "--signature needs a trust source: --public-key or --certificate-chain"
                );
            }
            return Ok(Vec::new());
        };
        if self.signature.is_some() && paths.len() != 1 {
            anyhow::bail!("--signature: give exactly one model directory");
        }
        let mut outcomes = Vec::new();
        for dir in paths {
            if tensorplay_engine::files::is_remote(dir) {
                anyhow::bail!(
                    "{}: signatures of remote models are not verified yet; download the model directory and audit it",
                    dir.display()
                );
            }
            if !dir.is_dir() {
                anyhow::bail!(
                    "{}: a model signature covers a model directory; give the directory, not a file",
                    dir.display()
                );
            }
            let signature = self
                .signature
                .clone()
                .unwrap_or_else(|| dir.join("model.sig"));
            // Without --require-signature an absent signature is no finding: nothing to verify.
            if !self.require_signature && !signature.exists() {
                continue;
            }
            outcomes.push(provenance::verify(&Request {
                model: dir.clone(),
                signature,
                trust: trust.clone(),
            }));
        }
        Ok(outcomes)
    }
}
