//! What a bill of materials says of one checkpoint (`--cyclonedx`): the files it is made of
//! with their digests, and what its bytes show of the model (architecture, parameters per
//! dtype, a digest of its tensor list, its chat templates' digests). Gathered only when a
//! BOM is asked for; the CycloneDX renderer reads nothing else.

use crate::template::Judged;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use tensorplay_engine::Checkpoint;

/// One checkpoint's inventory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// The files the checkpoint is made of (an index and its shards, a directory's files, or
    /// the one file), then the `config.json` beside it when there is one.
    pub files: Vec<FileDigest>,
    /// Elements of every tensor the checkpoint lists, each name once (as
    /// `sum(t.numel() for t in state_dict.values())` counts them); a block-quantised GGUF
    /// tensor's logical elements, not its bytes.
    pub parameters: u64,
    /// Those elements per dtype (`float16`), a GGUF tensor's under its block type (`Q4_K`):
    /// the dtype and quantisation histogram.
    pub dtypes: BTreeMap<String, u64>,
    /// SHA-256 (hex) of the tensor list ([`tensors_digest`]); empty when it was not read.
    pub tensors_digest: String,
    /// The architecture the bytes name: `config.json`'s `model_type` and `architectures`,
    /// or a GGUF's `general.architecture`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<Architecture>,
    /// SHA-256 (hex) of each chat template the checkpoint carries, as TP701–TP706 hash it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chat_templates: Vec<String>,
}

/// A file and what is known of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// The path, as the report names files.
    pub path: String,
    /// Its size in bytes, when it could be measured.
    pub size: Option<u64>,
    /// SHA-256 (lowercase hex) of every byte, when this run read them all.
    pub sha256: Option<String>,
    /// Why `sha256` is absent (a metadata-only or remote run, a file that could not be read);
    /// never a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_hashed: Option<String>,
}

/// The model's architecture, and where it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Architecture {
    /// The family (`llama`, `bert`): `model_type`, or `general.architecture`.
    pub family: Option<String>,
    /// The classes (`LlamaForCausalLM`): `config.json`'s `architectures`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
    /// `config.json`'s path, or `general.architecture` for a GGUF.
    pub source: String,
}

impl Inventory {
    /// What `ckpt`'s bytes show, its chat templates as the template rules judged them; the
    /// files are the caller's to add (it knows which it read).
    pub fn of(ckpt: &Checkpoint, templates: &[Judged]) -> Inventory {
        let mut parameters = 0u64;
        let mut dtypes = BTreeMap::<String, u64>::new();
        let mut add = |kind: &str, elements: u64| {
            parameters = parameters.saturating_add(elements);
            let count = dtypes.entry(kind.to_owned()).or_default();
            *count = count.saturating_add(elements);
        };
        // A GGUF tensor stored in quantised blocks is a `uint8` tensor of its blocks' bytes:
        // counted as its logical elements under its block type (`Q4_K`), the bytes not again.
        let mut blocks = BTreeSet::<&str>::new();
        for composite in &ckpt.composites {
            let held = composite
                .components
                .iter()
                .find(|c| c.role.ends_with("blocks"));
            if let (Some(held), Some(shape)) = (held, &composite.shape) {
                let elements = shape.iter().try_fold(1u64, |n, d| n.checked_mul(*d));
                add(composite.layout, elements.unwrap_or(u64::MAX));
                blocks.insert(held.tensor.as_str());
            }
        }
        for tensor in &ckpt.tensors {
            if blocks.contains(tensor.name()) {
                continue;
            }
            let imp = tensor.tensor_impl();
            add(imp.dtype().name(), imp.layout().numel());
        }
        let architecture = ckpt
            .metadata
            .get("general.architecture")
            .and_then(|value| serde_json::from_str::<String>(value).ok())
            .map(|family| Architecture {
                family: Some(family),
                classes: Vec::new(),
                source: "general.architecture".to_owned(),
            });
        Inventory {
            files: Vec::new(),
            parameters,
            dtypes,
            tensors_digest: tensors_digest(ckpt),
            architecture,
            chat_templates: templates.iter().map(|t| t.origin.sha256.clone()).collect(),
        }
    }
}

/// SHA-256 (hex) of the tensor list: one line per tensor, `[name, dtype, shape]` as compact
/// JSON followed by `\n`, the lines sorted bytewise. Two checkpoints with the same tensors
/// share it whatever order they were saved in; it covers names, dtypes and shapes, not values.
pub fn tensors_digest(ckpt: &Checkpoint) -> String {
    let mut lines: Vec<String> = ckpt
        .tensors
        .iter()
        .map(|t| {
            let imp = t.tensor_impl();
            serde_json::json!([t.name(), imp.dtype().name(), imp.layout().sizes()]).to_string()
        })
        .collect();
    lines.sort_unstable();
    let mut hasher = Sha256::new();
    for line in &lines {
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    hex(&hasher.finalize())
}

/// The architecture `config.json`'s text names, or why it names none readable.
pub fn config_architecture(path: &str, text: &[u8]) -> Result<Architecture, String> {
    let value: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| format!("{path}: not JSON: {e}"))?;
    let object = value
        .as_object()
        .ok_or_else(|| format!("{path}: not a JSON object"))?;
    let family = object
        .get("model_type")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let classes: Vec<String> = object
        .get("architectures")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(Architecture {
        family,
        classes,
        source: path.to_owned(),
    })
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_family_and_classes() {
        let text = br#"{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}"#;
        let arch = config_architecture("m/config.json", text).unwrap();
        assert_eq!(arch.family.as_deref(), Some("llama"));
        assert_eq!(arch.classes, ["LlamaForCausalLM"]);
        assert_eq!(arch.source, "m/config.json");
        assert!(config_architecture("c.json", b"[1]").is_err());
        assert!(config_architecture("c.json", b"{").is_err());
    }
}
