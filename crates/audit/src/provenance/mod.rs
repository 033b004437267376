//! OpenSSF model signatures (the OMS v1.0 format `model_signing` writes): a model
//! directory's Sigstore bundle verified with the one trust source the user gives, its signed
//! in-toto statement read, and the local files serialised again and compared. The findings are
//! the provenance rules' (TP801–TP805); the facts name the signer for reports.

pub mod bundle;
pub mod keyless;
pub mod local;
pub mod remote;
pub mod statement;

pub use bundle::Trust;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Why a signature did not verify; each maps to a rule of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No signature where one is required (TP801).
    Unsigned(String),
    /// A malformed bundle or statement, or a signature that does not cover its payload (TP802).
    Invalid(String),
    /// Signed by a key or certificate the trust source does not vouch for (TP803).
    Untrusted(String),
    /// The trust source itself cannot be used (a key of a kind not supported, a file that is
    /// not PEM): nothing is trusted, so the signature is untrusted (TP803).
    Unusable(String),
    /// The local files differ from the signed manifest: one line per file (TP804).
    Mismatch(Vec<String>),
    /// A local file could not be read: not verified, so a mismatch (TP804).
    Unreadable(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unsigned(m)
            | Failure::Invalid(m)
            | Failure::Untrusted(m)
            | Failure::Unusable(m)
            | Failure::Unreadable(m) => f.write_str(m),
            Failure::Mismatch(lines) => f.write_str(&lines.join("; ")),
        }
    }
}

/// Who signed, as reports name them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Signer {
    /// A bare key: `sha256:` of its SubjectPublicKeyInfo DER.
    Key {
        /// `sha256:…`.
        fingerprint: String,
    },
    /// A certificate of a private PKI: its subject and `sha256:` of its DER.
    Certificate {
        /// `CN=…` (RFC 4514).
        subject: String,
        /// `sha256:…`.
        fingerprint: String,
    },
    /// A Sigstore (keyless) signer: the certificate's identity and OIDC issuer, as required.
    Identity {
        /// The SAN: an email address or a URI.
        identity: String,
        /// The OIDC issuer.
        issuer: String,
    },
}

/// A model directory's signature as the report carries it, for people and for renderers
/// that name the signer (an ML-BOM).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignatureFacts {
    /// The model directory, as given.
    pub model: String,
    /// The signature file.
    pub signature: String,
    /// `verified`, `unsigned`, `invalid`, `untrusted` or `mismatch`.
    pub status: String,
    /// The trust source used: `key`, `certificate` or `keyless`.
    pub method: String,
    /// Who signed: present when the signature verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<Signer>,
    /// The signed root digest (SHA-256 over the resources' digests), when verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_digest: Option<String>,
    /// Resources (files or shards) the signature covers, when verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<usize>,
    /// What the signed digests were compared with, once the files were: `hashed` (every byte
    /// of every file hashed) or `hub-lfs-oid` (a Hub repository's LFS files by the SHA-256
    /// the Hub lists for them, its other files hashed: the result trusts the Hub's content
    /// addressing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digests: Option<String>,
}

/// [`SignatureFacts::digests`] when every byte was hashed.
pub const DIGESTS_HASHED: &str = "hashed";
/// [`SignatureFacts::digests`] when LFS files were compared by the Hub's `lfs.oid`.
pub const DIGESTS_HUB_LFS_OID: &str = "hub-lfs-oid";

/// What to verify: one model directory, its signature, the one trust source.
#[derive(Debug, Clone)]
pub struct Request {
    /// The model directory.
    pub model: PathBuf,
    /// The signature (`model.sig` in the directory unless given).
    pub signature: PathBuf,
    /// The key or certificates trusted.
    pub trust: Trust,
}

/// A request's result: the facts, and why it failed if it did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// For the report.
    pub facts: SignatureFacts,
    /// `None` when the signature verified and the files match it.
    pub failure: Option<Failure>,
}

/// `request` verified: the bundle with its trust source, the statement, then every local
/// file against it.
pub fn verify(request: &Request) -> Outcome {
    conclude(request, |facts| run(request, facts))
}

/// The outcome of `check`, which fills in the facts it learns; the status follows from its
/// failure, and a failed check names no signer.
fn conclude(
    request: &Request,
    check: impl FnOnce(&mut SignatureFacts) -> Result<(), Failure>,
) -> Outcome {
    let mut facts = SignatureFacts {
        model: request.model.display().to_string(),
        signature: request.signature.display().to_string(),
        status: String::new(),
        method: match request.trust {
            Trust::PublicKey(_) => "key",
            Trust::CertificateChain(_) => "certificate",
            Trust::Keyless(_) => "keyless",
        }
        .into(),
        signer: None,
        root_digest: None,
        resources: None,
        digests: None,
    };
    let failure = check(&mut facts).err();
    facts.status = match &failure {
        None => "verified",
        Some(Failure::Unsigned(_)) => "unsigned",
        Some(Failure::Invalid(_)) => "invalid",
        Some(Failure::Untrusted(_) | Failure::Unusable(_)) => "untrusted",
        Some(Failure::Mismatch(_) | Failure::Unreadable(_)) => "mismatch",
    }
    .into();
    if failure.is_some() {
        facts.signer = None;
    }
    Outcome { facts, failure }
}

/// The most a signature file is read: a bundle is a few kilobytes plus its manifest (a
/// hundred bytes a file or shard), so a larger one is refused before it fills memory.
pub const MAX_SIGNATURE_BYTES: u64 = 64 << 20;

/// The signature file, read up to [`MAX_SIGNATURE_BYTES`] and one byte more.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_SIGNATURE_BYTES + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn run(request: &Request, facts: &mut SignatureFacts) -> Result<(), Failure> {
    let bytes = match read_bounded(&request.signature) {
        Ok(bytes) if bytes.len() as u64 > MAX_SIGNATURE_BYTES => {
            return Err(Failure::Invalid(format!(
                "{} is larger than the {} MiB a signature bundle is read up to",
                request.signature.display(),
                MAX_SIGNATURE_BYTES >> 20
            )))
        }
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::Unsigned(format!(
                "{} has no signature: {} does not exist",
                request.model.display(),
                request.signature.display()
            )))
        }
        Err(e) => {
            return Err(Failure::Invalid(format!(
                "cannot read {}: {e}",
                request.signature.display()
            )))
        }
    };
    let manifest = verify_envelope(&bytes, &request.trust, facts)?;
    let mut also_ignored: Vec<String> = local::GIT_PATHS.iter().map(|p| (*p).to_owned()).collect();
    if let Some(rel) = relative_inside(&request.model, &request.signature) {
        also_ignored.push(rel);
    }
    let local = local::serialise(&request.model, &manifest.serialization, &also_ignored)?;
    facts.digests = Some(DIGESTS_HASHED.to_owned());
    let differences = local::compare(&manifest.resources, &local);
    conclude_comparison(&manifest, differences, facts)
}

/// The bundle `bytes` verified with `trust` and its statement read: the signed manifest,
/// with the signer recorded in `facts`.
fn verify_envelope(
    bytes: &[u8],
    trust: &Trust,
    facts: &mut SignatureFacts,
) -> Result<statement::SignedManifest, Failure> {
    let verified = bundle::verify(bytes, trust)?;
    let manifest = statement::parse(&verified.payload_type, &verified.payload)?;
    // The signer is known once the envelope verified, whatever the files say.
    facts.signer = Some(verified.signer);
    Ok(manifest)
}

/// A mismatch when the files differ from `manifest`; else the signed root and count.
fn conclude_comparison(
    manifest: &statement::SignedManifest,
    differences: Vec<String>,
    facts: &mut SignatureFacts,
) -> Result<(), Failure> {
    if !differences.is_empty() {
        return Err(Failure::Mismatch(differences));
    }
    facts.root_digest = Some(format!("sha256:{}", manifest.root_digest));
    facts.resources = Some(manifest.resources.len());
    Ok(())
}

/// `path` relative to `dir` with `/` separators, when it lies inside it.
fn relative_inside(dir: &Path, path: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let parent = path.parent()?.canonicalize().ok()?;
    let rel = parent.strip_prefix(&dir).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.push(path.file_name()?.to_string_lossy().into_owned());
    Some(parts.join("/"))
}

/// The unsigned OMS manifest of `model` (files, sha256, `model.sig` and git paths left out):
/// the statement `model_signing sign` wraps, for a signing step elsewhere.
pub fn unsigned_manifest(model: &Path) -> Result<serde_json::Value, Failure> {
    let mut ignore_paths = vec!["model.sig".to_owned()];
    ignore_paths.extend(local::GIT_PATHS.iter().map(|p| (*p).to_owned()));
    let serialization = statement::Serialization {
        method: statement::Method::Files,
        hash: statement::Hash::Sha256,
        allow_symlinks: false,
        ignore_paths,
    };
    let resources: Vec<_> = local::serialise(model, &serialization, &[])?
        .into_values()
        .collect();
    let name = model
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    Ok(statement::unsigned(&name, &serialization, &resources))
}
