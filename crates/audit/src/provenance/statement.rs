//! The signed in-toto statement of an OpenSSF model signature (OMS v1.0, and the v0.2
//! `Digests/v0.1` form): the serialisation parameters and the resources' digests, with the
//! subject's root digest checked against them.

use super::Failure;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// OMS v1.0.
pub const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";
/// The v0.2 form, which signed the files' digests as subjects.
const PREDICATE_TYPE_COMPAT: &str = "https://model_signing/Digests/v0.1";

/// How the model was cut into resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// One resource per file.
    Files,
    /// One resource per `shard_size` bytes of each file (`path:start:end`).
    Shards {
        /// Bytes per shard, at least 1.
        shard_size: u64,
    },
}

/// A hashing algorithm the serialisation names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    /// `sha256`.
    Sha256,
    /// `blake2` (BLAKE2b-512; its resources say `blake2b`).
    Blake2,
    /// `blake3`.
    Blake3,
}

impl Hash {
    /// The resources' `algorithm` for digests of this hash.
    pub fn digest_name(self) -> &'static str {
        match self {
            Hash::Sha256 => "sha256",
            Hash::Blake2 => "blake2b",
            Hash::Blake3 => "blake3",
        }
    }
}

/// The parameters the local files are serialised again with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serialization {
    /// Files or shards.
    pub method: Method,
    /// The hash of every resource.
    pub hash: Hash,
    /// Whether symbolic links were followed (else one fails the verification).
    pub allow_symlinks: bool,
    /// Paths relative to the model directory left out of the manifest.
    pub ignore_paths: Vec<String>,
}

/// One signed resource: a file or a shard, its algorithm and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// `config.json` or `model.safetensors:0:1000`.
    pub name: String,
    /// `sha256`, `blake2b`, `blake3`.
    pub algorithm: String,
    /// The digest, lowercase hex.
    pub digest: String,
}

/// The statement's content once checked.
#[derive(Debug, Clone)]
pub struct SignedManifest {
    /// The subject's name (the signed directory's name); informative only.
    pub model_name: String,
    /// SHA-256 over the resources' digests, in their listed order (hex).
    pub root_digest: String,
    /// How to serialise the local files.
    pub serialization: Serialization,
    /// Every resource, as listed.
    pub resources: Vec<Resource>,
}

fn invalid(what: impl Into<String>) -> Failure {
    Failure::Invalid(format!("the signed statement {}", what.into()))
}

fn str_field<'a>(value: &'a Value, key: &str, what: &str) -> Result<&'a str, Failure> {
    value
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("has no string `{key}` in {what}")))
}

/// The manifest a verified DSSE payload of `payload_type` states.
pub fn parse(payload_type: &str, payload: &[u8]) -> Result<SignedManifest, Failure> {
    if payload_type != PAYLOAD_TYPE {
        return Err(invalid(format!(
            "is of type {payload_type:?}, not {PAYLOAD_TYPE}"
        )));
    }
    let statement: Value =
        serde_json::from_slice(payload).map_err(|e| invalid(format!("is not JSON: {e}")))?;
    let kind = str_field(&statement, "_type", "the statement")?;
    if kind != STATEMENT_TYPE {
        return Err(invalid(format!("is a {kind:?}, not {STATEMENT_TYPE}")));
    }
    let subjects = statement
        .get("subject")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("has no `subject` list"))?;
    match str_field(&statement, "predicateType", "the statement")? {
        PREDICATE_TYPE => parse_v1(&statement, subjects),
        PREDICATE_TYPE_COMPAT => parse_compat(subjects),
        other => Err(invalid(format!(
            "has predicate type {other:?}, not {PREDICATE_TYPE}"
        ))),
    }
}

fn parse_v1(statement: &Value, subjects: &[Value]) -> Result<SignedManifest, Failure> {
    let [subject] = subjects else {
        return Err(invalid(format!(
            "has {} subjects where OMS v1.0 has exactly one",
            subjects.len()
        )));
    };
    let model_name = str_field(subject, "name", "the subject")?.to_owned();
    let root_digest = subject
        .get("digest")
        .map(|d| str_field(d, "sha256", "the subject's digest"))
        .transpose()?
        .ok_or_else(|| invalid("has no subject digest"))?
        .to_ascii_lowercase();
    let predicate = statement
        .get("predicate")
        .ok_or_else(|| invalid("has no predicate"))?;
    let serialization = parse_serialization(
        predicate
            .get("serialization")
            .ok_or_else(|| invalid("has no `serialization` in its predicate"))?,
    )?;
    let listed = predicate
        .get("resources")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("has no `resources` list"))?;
    let mut resources = Vec::with_capacity(listed.len());
    let mut root = Sha256::new();
    for resource in listed {
        let name = str_field(resource, "name", "a resource")?.to_owned();
        let algorithm = str_field(resource, "algorithm", "a resource")?.to_owned();
        let digest = str_field(resource, "digest", "a resource")?.to_ascii_lowercase();
        let bytes = hex_decode(&digest)
            .ok_or_else(|| invalid(format!("gives {name:?} a digest that is not hex")))?;
        root.update(&bytes);
        resources.push(Resource {
            name,
            algorithm,
            digest,
        });
    }
    let computed = hex(&root.finalize());
    if computed != root_digest {
        return Err(invalid(format!(
            "is inconsistent: its root digest is {root_digest}, its resources hash to {computed}"
        )));
    }
    Ok(SignedManifest {
        model_name,
        root_digest,
        serialization,
        resources,
    })
}

/// v0.2 signed each file as a subject, with sha256, files method and no symlinks.
fn parse_compat(subjects: &[Value]) -> Result<SignedManifest, Failure> {
    let mut resources = Vec::with_capacity(subjects.len());
    let mut root = Sha256::new();
    for subject in subjects {
        let name = str_field(subject, "name", "a subject")?.to_owned();
        let digest = subject
            .get("digest")
            .map(|d| str_field(d, "sha256", "a subject's digest"))
            .transpose()?
            .ok_or_else(|| invalid(format!("gives {name:?} no sha256 digest")))?
            .to_ascii_lowercase();
        let bytes = hex_decode(&digest)
            .ok_or_else(|| invalid(format!("gives {name:?} a digest that is not hex")))?;
        root.update(&bytes);
        resources.push(Resource {
            name,
            algorithm: "sha256".into(),
            digest,
        });
    }
    Ok(SignedManifest {
        model_name: String::new(),
        root_digest: hex(&root.finalize()),
        serialization: Serialization {
            method: Method::Files,
            hash: Hash::Sha256,
            allow_symlinks: false,
            ignore_paths: Vec::new(),
        },
        resources,
    })
}

fn parse_serialization(value: &Value) -> Result<Serialization, Failure> {
    let what = "the serialization";
    let hash = match str_field(value, "hash_type", what)? {
        "sha256" => Hash::Sha256,
        "blake2" => Hash::Blake2,
        "blake3" => Hash::Blake3,
        other => {
            return Err(invalid(format!(
                "hashes with {other:?}, which verifiers do not know (sha256, blake2, blake3)"
            )))
        }
    };
    let allow_symlinks = value
        .get("allow_symlinks")
        .and_then(Value::as_bool)
        .ok_or_else(|| invalid("has no boolean `allow_symlinks` in its serialization"))?;
    let ignore_paths = match value.get("ignore_paths") {
        None => Vec::new(),
        Some(list) => list
            .as_array()
            .and_then(|l| {
                l.iter()
                    .map(|p| p.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| invalid("has `ignore_paths` that are not a list of strings"))?,
    };
    let method = match str_field(value, "method", what)? {
        "files" => Method::Files,
        "shards" => {
            // A JSON number; the protobuf route some signers take writes it as a float.
            let size = value.get("shard_size").and_then(|v| {
                v.as_u64().or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f < 2f64.powi(53))
                        .map(|f| f as u64)
                })
            });
            match size {
                Some(shard_size) if shard_size >= 1 => Method::Shards { shard_size },
                _ => return Err(invalid("has no positive integer `shard_size`")),
            }
        }
        other => {
            return Err(invalid(format!(
                "uses serialization method {other:?} (files, shards)"
            )))
        }
    };
    Ok(Serialization {
        method,
        hash,
        allow_symlinks,
        ignore_paths,
    })
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The unsigned OMS v1.0 statement over `resources` (in the order given) for a model named
/// `model_name`: what `model_signing sign` wraps in its DSSE envelope.
pub fn unsigned(model_name: &str, serialization: &Serialization, resources: &[Resource]) -> Value {
    let mut root = Sha256::new();
    for r in resources {
        root.update(hex_decode(&r.digest).unwrap_or_default());
    }
    let mut params = serde_json::json!({
        "method": match serialization.method { Method::Files => "files", Method::Shards { .. } => "shards" },
        "hash_type": match serialization.hash { Hash::Sha256 => "sha256", Hash::Blake2 => "blake2", Hash::Blake3 => "blake3" },
        "allow_symlinks": serialization.allow_symlinks,
    });
    if let Method::Shards { shard_size } = serialization.method {
        params["shard_size"] = shard_size.into();
    }
    if !serialization.ignore_paths.is_empty() {
        params["ignore_paths"] = serialization.ignore_paths.clone().into();
    }
    serde_json::json!({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sha256": hex(&root.finalize())}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "serialization": params,
            "resources": resources.iter().map(|r| serde_json::json!({
                "name": r.name, "algorithm": r.algorithm, "digest": r.digest,
            })).collect::<Vec<_>>(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(resources: Value, root: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"name": "m", "digest": {"sha256": root}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "serialization": {"method": "files", "hash_type": "sha256", "allow_symlinks": false},
                "resources": resources,
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_root_digest_covers_the_resources_in_their_listed_order() {
        let a = "00".repeat(32);
        let b = "11".repeat(32);
        let listed = serde_json::json!([
            {"name": "a", "algorithm": "sha256", "digest": a},
            {"name": "b", "algorithm": "sha256", "digest": b},
        ]);
        let mut root = Sha256::new();
        root.update([0u8; 32]);
        root.update([0x11u8; 32]);
        let good = hex(&root.finalize());
        let parsed = parse(PAYLOAD_TYPE, &statement(listed.clone(), &good)).unwrap();
        assert_eq!(parsed.resources.len(), 2);
        // The same digests in the other order hash to another root.
        let swapped = serde_json::json!([listed[1], listed[0]]);
        assert!(matches!(
            parse(PAYLOAD_TYPE, &statement(swapped, &good)),
            Err(Failure::Invalid(m)) if m.contains("inconsistent")
        ));
    }

    #[test]
    fn other_payloads_predicates_and_subject_counts_are_refused() {
        assert!(parse("text/plain", b"{}").is_err());
        assert!(parse(PAYLOAD_TYPE, b"not json").is_err());
        let mut two =
            serde_json::from_slice::<Value>(&statement(serde_json::json!([]), "")).unwrap();
        two["subject"] = serde_json::json!([{"name": "a", "digest": {"sha256": ""}}, {"name": "b", "digest": {"sha256": ""}}]);
        assert!(matches!(
            parse(PAYLOAD_TYPE, &serde_json::to_vec(&two).unwrap()),
            Err(Failure::Invalid(m)) if m.contains("2 subjects")
        ));
        two["predicateType"] = "https://example.com/other".into();
        assert!(parse(PAYLOAD_TYPE, &serde_json::to_vec(&two).unwrap()).is_err());
    }

    #[test]
    fn a_float_shard_size_is_read_as_the_integer_it_is() {
        let s = parse_serialization(&serde_json::json!({
            "method": "shards", "hash_type": "blake3", "allow_symlinks": false, "shard_size": 100.0
        }))
        .unwrap();
        assert_eq!(s.method, Method::Shards { shard_size: 100 });
        assert!(parse_serialization(&serde_json::json!({
            "method": "shards", "hash_type": "sha256", "allow_symlinks": false, "shard_size": 0
        }))
        .is_err());
        assert!(parse_serialization(&serde_json::json!({
            "method": "files", "hash_type": "blake2b", "allow_symlinks": false
        }))
        .is_err());
    }
}
