//! A CycloneDX 1.6 bill of materials (JSON) of what a run read: the model as
//! `metadata.component` (type `machine-learning-model`, with a `modelCard` of what the bytes
//! show), one `file` component per file with its SHA-256 and size, and the verdict as
//! properties. Written by hand with serde: the Rust CycloneDX crate stops at 1.5, which has
//! no `machine-learning-model`.
//!
//! The serial number is derived from the BOM's content (a UUID of version 8 from its
//! SHA-256), the time included: with `SOURCE_DATE_EPOCH` set, the same run writes the same
//! bytes; without it, the time of writing makes each BOM's serial its own.

use anyhow::Context as _;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tensorplay_audit::inventory::Inventory;
use tensorplay_audit::report::{FileReport, Report};

/// Names of properties this BOM defines; the prefix is the tool's.
const PREFIX: &str = "tensorplay:";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Bom {
    bom_format: &'static str,
    spec_version: &'static str,
    serial_number: String,
    version: u32,
    metadata: Metadata,
    components: Vec<Component>,
}

#[derive(Serialize)]
struct Metadata {
    timestamp: String,
    tools: Tools,
    component: Component,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    properties: Vec<Property>,
}

#[derive(Serialize)]
struct Tools {
    components: Vec<Component>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Component {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(rename = "bom-ref", skip_serializing_if = "Option::is_none")]
    bom_ref: Option<String>,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    hashes: Vec<Hash>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_card: Option<ModelCard>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    properties: Vec<Property>,
}

#[derive(Serialize)]
struct Hash {
    alg: &'static str,
    content: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ModelCard {
    model_parameters: ModelParameters,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    properties: Vec<Property>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct ModelParameters {
    #[serde(skip_serializing_if = "Option::is_none")]
    architecture_family: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_architecture: Option<String>,
}

#[derive(Serialize)]
struct Property {
    name: String,
    value: String,
}

fn property(name: &str, value: impl ToString) -> Property {
    Property {
        name: format!("{PREFIX}{name}"),
        value: value.to_string(),
    }
}

/// The BOM of `report`, written at `SOURCE_DATE_EPOCH` when set, else now.
pub fn render(report: &Report) -> anyhow::Result<String> {
    render_at(report, written_at()?)
}

/// The time the BOM says it was written: `SOURCE_DATE_EPOCH` (seconds since the epoch) for a
/// reproducible BOM, else now.
fn written_at() -> anyhow::Result<SystemTime> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(text) => {
            let secs: u64 = text.trim().parse().with_context(|| {
                format!("SOURCE_DATE_EPOCH={text}: expected a count of seconds since 1970")
            })?;
            UNIX_EPOCH
                .checked_add(Duration::from_secs(secs))
                .with_context(|| format!("SOURCE_DATE_EPOCH={text}: out of range"))
        }
        Err(_) => Ok(SystemTime::now().max(UNIX_EPOCH)),
    }
}

/// The BOM of `report`, written at `at`.
pub fn render_at(report: &Report, at: SystemTime) -> anyhow::Result<String> {
    let mut bom = Bom {
        bom_format: "CycloneDX",
        spec_version: "1.6",
        serial_number: String::new(),
        version: 1,
        metadata: Metadata {
            timestamp: format!("{}Z", super::timestamp::format_utc(at)),
            tools: Tools {
                components: vec![Component {
                    kind: "application",
                    name: report.tool.name.clone(),
                    version: Some(report.tool.version.clone()),
                    ..Component::default()
                }],
            },
            component: model(report),
            properties: Vec::new(),
        },
        components: files(report),
    };
    // The serial is the content's: everything above, the time included, with no serial yet.
    let digest = Sha256::digest(serde_json::to_vec(&bom)?);
    bom.serial_number = urn_uuid(&digest);
    let mut text = serde_json::to_string_pretty(&bom)?;
    text.push('\n');
    Ok(text)
}

/// `urn:uuid:` and a version-8 UUID (RFC 9562) from the first 16 bytes of `digest`.
fn urn_uuid(digest: &[u8]) -> String {
    let mut b = [0u8; 16];
    for (to, from) in b.iter_mut().zip(digest) {
        *to = *from;
    }
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = tensorplay_audit::inventory::hex(&b);
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The model: what the run's paths have in common, its card from every checkpoint's
/// inventory, and the verdict.
fn model(report: &Report) -> Component {
    let root = common_root(report.files.iter().map(|f| f.path.as_str()));
    let (name, version) = hub_revision(&root);
    let inventories: Vec<&Inventory> = report
        .files
        .iter()
        .filter_map(|f| f.inventory.as_ref())
        .collect();

    let mut parameters = 0u64;
    let mut dtypes = BTreeMap::<&str, u64>::new();
    for inventory in &inventories {
        parameters = parameters.saturating_add(inventory.parameters);
        for (dtype, count) in &inventory.dtypes {
            let sum = dtypes.entry(dtype).or_default();
            *sum = sum.saturating_add(*count);
        }
    }
    let architectures: Vec<_> = inventories
        .iter()
        .filter_map(|i| i.architecture.as_ref())
        .collect();
    let families: BTreeSet<&str> = architectures
        .iter()
        .filter_map(|a| a.family.as_deref())
        .collect();
    let classes: BTreeSet<&str> = architectures
        .iter()
        .flat_map(|a| a.classes.iter().map(String::as_str))
        .collect();
    let mut card = vec![property("parameters", parameters)];
    for (dtype, count) in &dtypes {
        card.push(property(&format!("parameters:{dtype}"), count));
    }

    let mut properties = verdict_properties(report);
    // The tensor list's digest names one model's tensors: given when one checkpoint of the
    // run holds tensors (each file component carries its own).
    let with_tensors: Vec<&FileReport> = report.files.iter().filter(|f| f.tensors > 0).collect();
    if let [only] = with_tensors.as_slice() {
        if let Some(digest) = only.inventory.as_ref().map(|i| &i.tensors_digest) {
            if !digest.is_empty() {
                properties.push(property("tensors-sha256", digest));
            }
        }
    }
    let templates: BTreeSet<&str> = inventories
        .iter()
        .flat_map(|i| i.chat_templates.iter().map(String::as_str))
        .collect();
    for sha in templates {
        properties.push(property("chat-template-sha256", sha));
    }
    properties.extend(signer_properties(report));

    Component {
        kind: "machine-learning-model",
        bom_ref: Some("model".to_owned()),
        name,
        version,
        model_card: Some(ModelCard {
            model_parameters: ModelParameters {
                // One family, or none said: a run over several models names no one family.
                architecture_family: (families.len() == 1)
                    .then(|| families.iter().next().map(|f| (*f).to_owned()))
                    .flatten(),
                model_architecture: (!classes.is_empty() && families.len() <= 1)
                    .then(|| classes.into_iter().collect::<Vec<_>>().join(", ")),
            },
            properties: card,
        }),
        properties,
        ..Component::default()
    }
}

/// The verdict, the fail-on level, the totals and each rule code that found something.
fn verdict_properties(report: &Report) -> Vec<Property> {
    let summary = &report.summary;
    let mut properties = vec![
        property("verdict", if summary.passed { "pass" } else { "fail" }),
        property("fail-on", super::fail_on_name(summary.fail_on)),
        property("errors", summary.errors),
        property("warnings", summary.warnings),
        property("infos", summary.infos),
    ];
    let codes: BTreeSet<&str> = report
        .files
        .iter()
        .flat_map(|f| &f.findings)
        .map(|f| f.code.as_str())
        .collect();
    for code in codes {
        properties.push(property("rule", code));
    }
    properties
}

/// Each verified signature's signer (`--require-signature` or a trust source given): the
/// identity and issuer of a keyless signature, the subject and fingerprint of a certificate,
/// or the fingerprint of a key, with the model directory it covers and its root digest. A
/// signature that did not verify names no signer: its finding says why.
fn signer_properties(report: &Report) -> Vec<Property> {
    use tensorplay_audit::provenance::Signer;
    let mut properties = Vec::new();
    for facts in &report.signatures {
        let Some(signer) = facts.signer.as_ref().filter(|_| facts.status == "verified") else {
            continue;
        };
        properties.push(property("signed-model", &facts.model));
        properties.push(property("signature-method", &facts.method));
        match signer {
            Signer::Key { fingerprint } => {
                properties.push(property("signer-key-fingerprint", fingerprint));
            }
            Signer::Certificate {
                subject,
                fingerprint,
            } => {
                properties.push(property("signer-certificate-subject", subject));
                properties.push(property("signer-certificate-fingerprint", fingerprint));
            }
            Signer::Identity { identity, issuer } => {
                properties.push(property("signer-identity", identity));
                properties.push(property("signer-issuer", issuer));
            }
        }
        if let Some(root) = &facts.root_digest {
            properties.push(property("signed-root-digest", root));
        }
    }
    properties
}

/// One `file` component per file the run's checkpoints are made of (a file two checkpoints
/// share, a `config.json` beside both, once), in report order.
fn files(report: &Report) -> Vec<Component> {
    let mut seen = BTreeSet::new();
    let mut components = Vec::new();
    for file in &report.files {
        let Some(inventory) = &file.inventory else {
            // A report without inventories (a merge of parts audited without --cyclonedx):
            // the checkpoint is named, its bytes are not vouched for.
            if seen.insert(file.path.clone()) {
                components.push(Component {
                    kind: "file",
                    bom_ref: Some(format!("file:{}", file.path)),
                    name: file.path.clone(),
                    properties: vec![
                        property("checkpoint", &file.path),
                        property(
                            "hash",
                            "not computed: the report holds no inventory (audited without --cyclonedx)",
                        ),
                    ],
                    ..Component::default()
                });
            }
            continue;
        };
        for (i, digest) in inventory.files.iter().enumerate() {
            if !seen.insert(digest.path.clone()) {
                continue;
            }
            let mut properties = vec![property("checkpoint", &file.path)];
            if let Some(size) = digest.size {
                properties.push(property("size", size));
            }
            if let Some(why) = &digest.not_hashed {
                properties.push(property("hash", why));
            }
            // The checkpoint's own facts, on its first file.
            if i == 0 {
                if let Some(format) = &file.format {
                    properties.push(property("format", format));
                }
                properties.push(property("tensors", file.tensors));
                if !inventory.tensors_digest.is_empty() {
                    properties.push(property("tensors-sha256", &inventory.tensors_digest));
                }
                for sha in &inventory.chat_templates {
                    properties.push(property("chat-template-sha256", sha));
                }
            }
            components.push(Component {
                kind: "file",
                bom_ref: Some(format!("file:{}", digest.path)),
                name: digest.path.clone(),
                hashes: digest
                    .sha256
                    .iter()
                    .map(|sha| Hash {
                        alg: "SHA-256",
                        content: sha.clone(),
                    })
                    .collect(),
                properties,
                ..Component::default()
            });
        }
    }
    components
}

/// The longest leading run of `/`-separated parts every path shares: the one path of a
/// single checkpoint, the folder of a model's files; `.` when they share none.
fn common_root<'a>(paths: impl Iterator<Item = &'a str>) -> String {
    let mut root: Option<Vec<&str>> = None;
    for path in paths {
        let parts: Vec<&str> = path.split('/').collect();
        root = Some(match root {
            None => parts,
            Some(root) => root
                .iter()
                .zip(&parts)
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| *a)
                .collect(),
        });
    }
    let joined = root.unwrap_or_default().join("/");
    if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

/// A Hub path's repository and revision (`hf://org/model@rev/…` → `hf://org/model`, `rev`);
/// any other path whole, with no version.
fn hub_revision(root: &str) -> (String, Option<String>) {
    if let Some(rest) = root.strip_prefix("hf://") {
        if let Some((repo, after)) = rest.split_once('@') {
            let revision = after.split('/').next().unwrap_or_default();
            if !revision.is_empty() {
                return (format!("hf://{repo}"), Some(revision.to_owned()));
            }
        }
    }
    (root.to_owned(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_and_revisions() {
        let root = |paths: &[&str]| common_root(paths.iter().copied());
        assert_eq!(root(&["m/a.safetensors"]), "m/a.safetensors");
        assert_eq!(root(&["m/a.safetensors", "m/tokenizer_config.json"]), "m");
        assert_eq!(root(&["a", "b"]), ".");
        assert_eq!(root(&[]), ".");
        assert_eq!(
            hub_revision("hf://org/model@0123abc/sub"),
            ("hf://org/model".to_owned(), Some("0123abc".to_owned()))
        );
        assert_eq!(
            hub_revision("hf://org/model"),
            ("hf://org/model".to_owned(), None)
        );
        assert_eq!(hub_revision("m/x@y"), ("m/x@y".to_owned(), None));
    }

    #[test]
    fn serials_are_version_8_uuids() {
        let urn = urn_uuid(&Sha256::digest(b"bom"));
        let uuid = urn.strip_prefix("urn:uuid:").expect("urn");
        let groups: Vec<&str> = uuid.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(groups[2].starts_with('8'), "{uuid}");
        assert!(matches!(&groups[3][..1], "8" | "9" | "a" | "b"), "{uuid}");
        assert_ne!(urn, urn_uuid(&Sha256::digest(b"other")));
    }
}
