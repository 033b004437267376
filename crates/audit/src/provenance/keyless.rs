//! Keyless (Sigstore) model signatures: a Fulcio certificate for an OIDC identity, its SCT and
//! the Rekor entry, verified offline by `sigstore-verify` against the production trusted root
//! embedded in `sigstore-trust-root` (or a private Sigstore's, `--trust-root`). Its crypto runs
//! in `ring` through the provider below, so no second crypto library is built.

use super::{Failure, Signer};
use sigstore_crypto::provider::{CryptoProvider, HashContext};
use sigstore_crypto::SigningScheme;
use sigstore_verify::{Error as VerifyError, VerificationPolicy, Verifier};

/// `ring` (and `sha2`) as sigstore's crypto backend: what keyless verification needs,
/// signature checks and digests, and nothing that signs.
#[derive(Debug)]
struct RingProvider;

static RING: RingProvider = RingProvider;

struct Sha<D>(D);

impl<D: sha2::Digest + Send> HashContext for Sha<D> {
    fn update(&mut self, data: &[u8]) {
        sha2::Digest::update(&mut self.0, data);
    }
    fn finalize(self: Box<Self>) -> Vec<u8> {
        sha2::Digest::finalize(self.0).to_vec()
    }
}

impl CryptoProvider for RingProvider {
    fn hash(
        &self,
        algorithm: sigstore_verify::types::HashAlgorithm,
    ) -> sigstore_crypto::Result<Box<dyn HashContext>> {
        use sigstore_verify::types::HashAlgorithm as H;
        Ok(match algorithm {
            H::Sha2256 => Box::new(Sha(sha2::Sha256::default())),
            H::Sha2384 => Box::new(Sha(sha2::Sha384::default())),
            H::Sha2512 => Box::new(Sha(sha2::Sha512::default())),
            other => {
                return Err(sigstore_crypto::Error::UnsupportedAlgorithm(format!(
                    "cannot compute {other} digests"
                )))
            }
        })
    }

    fn verify_raw(
        &self,
        scheme: SigningScheme,
        public_key: &[u8],
        data: &[u8],
        signature: &[u8],
    ) -> sigstore_crypto::Result<()> {
        use ring::signature as sig;
        let algorithm: &dyn sig::VerificationAlgorithm = match scheme {
            SigningScheme::EcdsaP256Sha256 => &sig::ECDSA_P256_SHA256_ASN1,
            SigningScheme::EcdsaP256Sha384 => &sig::ECDSA_P256_SHA384_ASN1,
            SigningScheme::EcdsaP384Sha256 => &sig::ECDSA_P384_SHA256_ASN1,
            SigningScheme::EcdsaP384Sha384 => &sig::ECDSA_P384_SHA384_ASN1,
            SigningScheme::Ed25519 => &sig::ED25519,
            SigningScheme::RsaPssSha256 => &sig::RSA_PSS_2048_8192_SHA256,
            SigningScheme::RsaPssSha384 => &sig::RSA_PSS_2048_8192_SHA384,
            SigningScheme::RsaPssSha512 => &sig::RSA_PSS_2048_8192_SHA512,
            SigningScheme::RsaPkcs1Sha256 => &sig::RSA_PKCS1_2048_8192_SHA256,
            SigningScheme::RsaPkcs1Sha384 => &sig::RSA_PKCS1_2048_8192_SHA384,
            SigningScheme::RsaPkcs1Sha512 => &sig::RSA_PKCS1_2048_8192_SHA512,
            other => {
                return Err(sigstore_crypto::Error::UnsupportedAlgorithm(format!(
                    "{other:?} is not verified by this build"
                )))
            }
        };
        sig::UnparsedPublicKey::new(algorithm, public_key)
            .verify(data, signature)
            .map_err(|_| {
                sigstore_crypto::Error::Verification(format!("{} signature invalid", scheme.name()))
            })
    }

    fn verify_prehashed(
        &self,
        scheme: SigningScheme,
        _public_key: &[u8],
        _digest: &[u8],
        _signature: &[u8],
    ) -> sigstore_crypto::Result<()> {
        // ring verifies messages, not digests: only a digest-only artifact needs this, and
        // model signatures are DSSE envelopes, verified over their bytes.
        Err(sigstore_crypto::Error::UnsupportedAlgorithm(format!(
            "{scheme:?} over a pre-computed digest is not verified by this build"
        )))
    }
}

/// The keyless trust source: who must have signed, and the Sigstore root that vouches for
/// Fulcio, Rekor and the CT logs.
#[derive(Debug, Clone)]
pub struct Keyless {
    /// The certificate's SAN (an email or a URI), exactly.
    pub identity: String,
    /// The OIDC issuer the certificate records, exactly.
    pub issuer: String,
    /// A private Sigstore's trusted root (JSON); `None` for the production root embedded in
    /// this build.
    pub trusted_root: Option<String>,
}

/// The keyless bundle `bundle_json` verified: the Fulcio chain to the trusted root, the SCT,
/// the Rekor entry (inclusion proof or promise) or signed timestamp, the identity and issuer,
/// the DSSE signature, and the statement's subject bound to `root_digest`.
pub fn verify(bundle_json: &[u8], trust: &Keyless, root_digest: &str) -> Result<Signer, Failure> {
    // Ours, or an earlier call's: the same static either way.
    let _ = sigstore_crypto::install_default_provider(&RING);
    let text = std::str::from_utf8(bundle_json)
        .map_err(|_| Failure::Invalid("the signature is not UTF-8 JSON".into()))?;
    let bundle = sigstore_verify::types::Bundle::from_json(text)
        .map_err(|e| Failure::Invalid(format!("the signature is not a Sigstore bundle: {e}")))?;
    let root_json = trust
        .trusted_root
        .as_deref()
        .unwrap_or(sigstore_verify::trust_root::SIGSTORE_PRODUCTION_TRUSTED_ROOT);
    let root = sigstore_verify::trust_root::TrustedRoot::from_json(root_json)
        .map_err(|e| Failure::Unusable(format!("the Sigstore trusted root cannot be read: {e}")))?;
    let verifier = Verifier::new(&root)
        .map_err(|e| Failure::Unusable(format!("the Sigstore trusted root cannot be used: {e}")))?;
    let digest = sigstore_verify::types::Sha256Hash::from_hex(root_digest)
        .map_err(|e| Failure::Invalid(format!("the statement's root digest: {e}")))?;
    let policy = VerificationPolicy::new(trust.identity.as_str(), trust.issuer.clone());
    let artifact = sigstore_verify::types::Artifact::from_digest(digest);
    match verifier.verify(artifact, &bundle, &policy) {
        Ok(_) => Ok(Signer::Identity {
            identity: trust.identity.clone(),
            issuer: trust.issuer.clone(),
        }),
        Err(e) => Err(match e {
            VerifyError::IdentityMismatch { .. }
            | VerifyError::IssuerMismatch { .. }
            | VerifyError::Certificate(_)
            | VerifyError::TrustedCertificate(_)
            | VerifyError::TransparencyLog(sigstore_verify::TransparencyLogError::UnknownLog {
                ..
            }) => Failure::Untrusted(format!("the keyless signature is not trusted: {e}")),
            // A timestamp or log entry the root's authorities did not sign is evidence that
            // does not verify under this root.
            _ => Failure::Invalid(format!("the keyless signature does not verify: {e}")),
        }),
    }
}
