//! `audit --require-signature` and its trust source: each model directory's OpenSSF model
//! signature verified (`tensorplay_audit::provenance`), and `--emit-oms-manifest`.

use anyhow::Context as _;
use clap::Args;
use std::path::{Path, PathBuf};
use tensorplay_audit::provenance::{self, Outcome, Request, Trust};
use tensorplay_audit::report::RemoteFacts;

/// One model directory's signature check, and what it fetched of a remote one.
#[derive(Debug)]
pub struct Checked {
    /// The verification's outcome.
    pub outcome: Outcome,
    /// For a remote directory: its files' size and what the check fetched of them.
    pub remote: Option<RemoteFacts>,
}

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

    /// Each model directory among `paths` (remote ones mounted) checked: `Ok(vec![])` when no
    /// signature flag was given. A directory without a signature is reported only under
    /// --require-signature. A remote directory's LFS files are compared by the Hub's listed
    /// SHA-256 unless `deep` asks for every byte to be hashed.
    pub fn check(&self, paths: &[PathBuf], deep: bool) -> anyhow::Result<Vec<Checked>> {
        let trust = self.trust()?;
        if let Some(out) = &self.emit_oms_manifest {
            let [dir] = paths else {
                anyhow::bail!("--emit-oms-manifest: give exactly one model directory");
            };
            if tensorplay_engine::files::is_remote(dir) {
                anyhow::bail!(
                    "--emit-oms-manifest {}: give a local model directory",
                    dir.display()
                );
            }
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
                outcomes.extend(self.check_remote(dir, &trust, deep)?);
                continue;
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
            let outcome = provenance::verify(&Request {
                model: dir.clone(),
                signature,
                trust: trust.clone(),
            });
            outcomes.push(Checked {
                outcome,
                remote: None,
            });
        }
        Ok(outcomes)
    }

    /// A remote model directory (a mounted `hf://` repository or folder of one) checked.
    fn check_remote(
        &self,
        dir: &Path,
        trust: &Trust,
        deep: bool,
    ) -> anyhow::Result<Option<Checked>> {
        use tensorplay_engine::files;
        if !files::is_dir(dir) {
            anyhow::bail!(
                "{}: a model signature covers a model directory; give the repository or a folder of it, not a file",
                dir.display()
            );
        }
        let signature = match &self.signature {
            Some(given) if tensorplay_remote::is_remote(&given.to_string_lossy()) => {
                anyhow::bail!(
                    "--signature {}: give a local file, or leave it out to read model.sig from the repository",
                    given.display()
                )
            }
            Some(given) => given.clone(),
            None => dir.join("model.sig"),
        };
        // Without --require-signature an absent signature is no finding: nothing to verify.
        let present =
            files::is_file(&signature) || (!signature.starts_with(dir) && signature.exists());
        if !self.require_signature && !present {
            return Ok(None);
        }
        let before = files::stats_under(dir);
        let outcome = provenance::remote::verify(
            &Request {
                model: dir.to_owned(),
                signature,
                trust: trust.clone(),
            },
            deep,
        );
        // What this check fetched: the files' reads before it (another path of the run over
        // the same repository) are not its own.
        let remote = files::stats_under(dir).map(|after| {
            let (bytes, requests) = before.map_or((0, 0), |b| (b.bytes_read, b.requests));
            RemoteFacts {
                size: after.len,
                bytes_read: after.bytes_read.saturating_sub(bytes),
                requests: after.requests.saturating_sub(requests),
                values_read: outcome.facts.digests.as_deref()
                    != Some(provenance::DIGESTS_HUB_LFS_OID),
            }
        });
        Ok(Some(Checked { outcome, remote }))
    }
}
