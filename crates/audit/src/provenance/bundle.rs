//! The Sigstore bundle of an OpenSSF model signature, and its DSSE envelope verified with a
//! public key or a private certificate chain. ECDSA runs in `ring`, certificate paths in
//! `rustls-webpki`; `x509-cert` reads keys and names. Nothing here is trusted by default.

use super::{Failure, Signer};
use base64::Engine as _;
use rustls_pki_types::{CertificateDer, UnixTime};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use x509_cert::der::{Decode, DecodePem, Encode};
use x509_cert::spki::{ObjectIdentifier, SubjectPublicKeyInfoOwned};
use x509_cert::Certificate;

/// What verification trusts: exactly one source, given by the user.
#[derive(Debug, Clone)]
pub enum Trust {
    /// A PEM public key (`--public-key`).
    PublicKey(Vec<u8>),
    /// PEM certificates, any of which may anchor the signing chain (`--certificate-chain`).
    CertificateChain(Vec<u8>),
    /// A Sigstore identity and issuer, with the root that vouches for them
    /// (`--identity`, `--issuer`, `--trust-root`).
    Keyless(super::keyless::Keyless),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    verification_material: Option<Material>,
    dsse_envelope: Option<Envelope>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Material {
    public_key: Option<KeyHint>,
    x509_certificate_chain: Option<Chain>,
    certificate: Option<RawCert>,
}

#[derive(Deserialize)]
struct KeyHint {
    hint: Option<String>,
}

#[derive(Deserialize)]
struct Chain {
    certificates: Vec<RawCert>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCert {
    raw_bytes: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    payload: String,
    payload_type: String,
    signatures: Vec<EnvelopeSignature>,
}

#[derive(Deserialize)]
struct EnvelopeSignature {
    sig: String,
}

/// DSSE's pre-authentication encoding: what the signature covers.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

fn b64(text: &str, what: &str) -> Result<Vec<u8>, Failure> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| Failure::Invalid(format!("the bundle's {what} is not base64: {e}")))
}

/// A verified envelope: its payload type, its payload and who signed it.
pub struct Verified {
    /// DSSE payload type.
    pub payload_type: String,
    /// The payload (the in-toto statement's bytes).
    pub payload: Vec<u8>,
    /// The key or certificate that signed it.
    pub signer: Signer,
}

/// The envelope of `bundle_json` verified with `trust`: `Untrusted` when the signer is not
/// the one trusted, `Invalid` when the bundle is malformed or its signature does not cover
/// its payload.
pub fn verify(bundle_json: &[u8], trust: &Trust) -> Result<Verified, Failure> {
    let bundle: Bundle = serde_json::from_slice(bundle_json)
        .map_err(|e| Failure::Invalid(format!("the signature is not a Sigstore bundle: {e}")))?;
    let material = bundle
        .verification_material
        .ok_or_else(|| Failure::Invalid("the bundle has no verification material".into()))?;
    let envelope = bundle
        .dsse_envelope
        .ok_or_else(|| Failure::Invalid("the bundle has no DSSE envelope".into()))?;
    let [signature] = envelope.signatures.as_slice() else {
        return Err(Failure::Invalid(format!(
            "the DSSE envelope has {} signatures where a model signature has one",
            envelope.signatures.len()
        )));
    };
    let payload = b64(&envelope.payload, "payload")?;
    let sig = b64(&signature.sig, "signature")?;
    let signed = pae(&envelope.payload_type, &payload);
    let signer = match trust {
        Trust::Keyless(keyless) => {
            let root_digest = serde_json::from_slice::<serde_json::Value>(&payload)
                .ok()
                .and_then(|s| {
                    s["subject"][0]["digest"]["sha256"]
                        .as_str()
                        .map(str::to_owned)
                })
                .ok_or_else(|| {
                    Failure::Invalid("the signed statement has no subject's sha256 digest".into())
                })?;
            super::keyless::verify(bundle_json, keyless, &root_digest)?
        }
        Trust::PublicKey(pem) => {
            let spki = SubjectPublicKeyInfoOwned::from_pem(pem).map_err(|e| {
                Failure::Unusable(format!("the public key is not a PEM public key: {e}"))
            })?;
            let der = spki
                .to_der()
                .map_err(|e| Failure::Unusable(format!("the public key: {e}")))?;
            if material.x509_certificate_chain.is_some() || material.certificate.is_some() {
                return Err(Failure::Untrusted(
                    "the model was signed with a certificate, and a public key was given".into(),
                ));
            }
            // The hint is SHA-256 of the key's PEM as the signer wrote it.
            if let Some(hint) = material.public_key.and_then(|k| k.hint) {
                let ours = super::statement::hex(&Sha256::digest(pem_of(&der)));
                if !hint.eq_ignore_ascii_case(&ours) {
                    return Err(Failure::Untrusted(format!(
                        "the model was signed by another key (key hint {hint}; the given key's is {ours})"
                    )));
                }
            }
            check_ecdsa(&spki, &signed, &sig)?;
            Signer::Key {
                fingerprint: format!("sha256:{}", super::statement::hex(&Sha256::digest(&der))),
            }
        }
        Trust::CertificateChain(pem) => {
            let raws: Vec<&RawCert> =
                match (&material.x509_certificate_chain, &material.certificate) {
                    (Some(chain), _) => chain.certificates.iter().collect(),
                    (None, Some(one)) => vec![one],
                    (None, None) => return Err(Failure::Untrusted(
                        "the model was signed with a bare key, and a certificate chain was given"
                            .into(),
                    )),
                };
            let ders = raws
                .iter()
                .map(|c| b64(&c.raw_bytes, "certificate"))
                .collect::<Result<Vec<_>, _>>()?;
            let (leaf_der, intermediates) = ders.split_first().ok_or_else(|| {
                Failure::Invalid("the bundle's certificate chain is empty".into())
            })?;
            let leaf = Certificate::from_der(leaf_der).map_err(|e| {
                Failure::Invalid(format!("the signing certificate cannot be read: {e}"))
            })?;
            check_chain(leaf_der, intermediates, &leaf, pem)?;
            check_ecdsa(&leaf.tbs_certificate.subject_public_key_info, &signed, &sig)?;
            Signer::Certificate {
                subject: leaf.tbs_certificate.subject.to_string(),
                fingerprint: format!(
                    "sha256:{}",
                    super::statement::hex(&Sha256::digest(leaf_der))
                ),
            }
        }
    };
    Ok(Verified {
        payload_type: envelope.payload_type,
        payload,
        signer,
    })
}

/// `der` as the PEM `cryptography` writes for a SubjectPublicKeyInfo.
fn pem_of(der: &[u8]) -> Vec<u8> {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN PUBLIC KEY-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END PUBLIC KEY-----\n");
    out.into_bytes()
}

const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const P521: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");

/// The ECDSA signature `sig` (DER) over `signed` checked with `spki`, with the hash its
/// curve implies (as `model_signing` signs).
fn check_ecdsa(spki: &SubjectPublicKeyInfoOwned, signed: &[u8], sig: &[u8]) -> Result<(), Failure> {
    if spki.algorithm.oid != EC_PUBLIC_KEY {
        return Err(Failure::Unusable(format!(
            "the signer's key is of algorithm {}, not an elliptic-curve key",
            spki.algorithm.oid
        )));
    }
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
    let algorithm: &dyn ring::signature::VerificationAlgorithm = match curve {
        Some(c) if c == P256 => &ring::signature::ECDSA_P256_SHA256_ASN1,
        Some(c) if c == P384 => &ring::signature::ECDSA_P384_SHA384_ASN1,
        Some(c) if c == P521 => {
            return Err(Failure::Unusable(
                "the signer's key is on P-521, which this build cannot verify".into(),
            ))
        }
        other => {
            return Err(Failure::Unusable(format!(
                "the signer's key is on curve {other:?}, not P-256 or P-384"
            )))
        }
    };
    let point = spki.subject_public_key.raw_bytes();
    ring::signature::UnparsedPublicKey::new(algorithm, point)
        .verify(signed, sig)
        .map_err(|_| {
            Failure::Invalid(
                "the DSSE signature does not verify over the bundle's payload with the signer's key"
                    .into(),
            )
        })
}

/// Code signing, RFC 5280 4.2.1.12 (1.3.6.1.5.5.7.3.3), as DER content octets.
const EKU_CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// The leaf's path to one of the PEM certificates in `anchors_pem`, through the bundle's
/// other certificates, valid when the leaf's validity began (`model_signing` checks at that
/// time too: a signature outlives its short-lived certificate).
fn check_chain(
    leaf_der: &[u8],
    intermediates: &[Vec<u8>],
    leaf: &Certificate,
    anchors_pem: &[u8],
) -> Result<(), Failure> {
    let anchors = Certificate::load_pem_chain(anchors_pem).map_err(|e| {
        Failure::Unusable(format!(
            "the certificate chain is not PEM certificates: {e}"
        ))
    })?;
    let anchor_ders = anchors
        .iter()
        .map(|c| c.to_der().map(CertificateDer::from))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::Unusable(format!("the certificate chain: {e}")))?;
    if anchor_ders.is_empty() {
        return Err(Failure::Unusable(
            "the certificate chain holds no certificate".into(),
        ));
    }
    let trust_anchors = anchor_ders
        .iter()
        .map(webpki::anchor_from_trusted_cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Failure::Unusable(format!(
                "a trusted certificate cannot anchor a chain: {e:?}"
            ))
        })?;
    let leaf_cert = CertificateDer::from(leaf_der);
    let end_entity = webpki::EndEntityCert::try_from(&leaf_cert)
        .map_err(|e| Failure::Invalid(format!("the signing certificate cannot be read: {e:?}")))?;
    let intermediates: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|d| CertificateDer::from(d.as_slice()))
        .collect();
    let at = leaf.tbs_certificate.validity.not_before.to_unix_duration();
    end_entity
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &trust_anchors,
            &intermediates,
            UnixTime::since_unix_epoch(at),
            webpki::KeyUsage::required_if_present(EKU_CODE_SIGNING),
            None,
            None,
        )
        .map_err(|e| {
            Failure::Untrusted(format!(
                "the signing certificate ({}) does not chain to the given certificates: {e:?}",
                leaf.tbs_certificate.subject
            ))
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(
            pae("application/vnd.in-toto+json", b"{}"),
            b"DSSEv1 28 application/vnd.in-toto+json 2 {}".to_vec()
        );
    }

    #[test]
    fn malformed_bundles_are_invalid_not_trusted() {
        let key = Trust::PublicKey(Vec::new());
        for bundle in [&b"not json"[..], b"{}", br#"{"verificationMaterial":{}}"#] {
            assert!(matches!(verify(bundle, &key), Err(Failure::Invalid(_))));
        }
        let two = br#"{"verificationMaterial":{},"dsseEnvelope":{"payload":"","payloadType":"x","signatures":[{"sig":""},{"sig":""}]}}"#;
        assert!(
            matches!(verify(two, &key), Err(Failure::Invalid(m)) if m.contains("2 signatures"))
        );
    }
}
