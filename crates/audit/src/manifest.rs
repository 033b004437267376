//! A checkpoint's layout as data: each tensor's name, dtype, shape, strides, device and
//! storage. `inspect --format layout` writes it, `audit --expect` (TP601) checks a checkpoint
//! against it, and `diff` compares two of them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tensorplay_engine::Checkpoint;

/// The `kind` field every layout file carries, so a JSON file of another kind is refused
/// rather than read as a layout with no tensors.
pub const KIND: &str = "tensorplay-layout";

/// What a layout file says of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`KIND`].
    pub kind: String,
    /// Layout format version.
    pub version: u32,
    /// Where it was taken from, for people.
    #[serde(default)]
    pub source: String,
    /// Tensors in file order.
    pub tensors: Vec<TensorEntry>,
}

/// One tensor of a [`Manifest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// Its name in the checkpoint.
    pub name: String,
    /// PyTorch's dtype name.
    pub dtype: String,
    /// Sizes.
    pub shape: Vec<u64>,
    /// In elements; absent in hand-written layouts, where only shapes matter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strides: Option<Vec<u64>>,
    /// The device its storage is on: where its bytes will be, whatever the tensor claims.
    pub device: String,
    /// Whether it is trainable.
    #[serde(default)]
    pub requires_grad: bool,
    /// The storage's key within the file; absent in hand-written layouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    /// Element offset into the storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_offset: Option<u64>,
}

/// Why a layout file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Not JSON of the layout's shape.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON of another kind.
    #[error(
        "not a tensorplay layout (kind {0:?}; write one with `tensorplay inspect --format layout`)"
    )]
    Kind(String),
    /// A newer format.
    #[error("layout version {0} is newer than this tensorplay reads (1)")]
    Version(u32),
    /// One name twice.
    #[error("tensor '{0}' is listed twice")]
    Duplicate(String),
}

impl Manifest {
    /// The layout of a checkpoint that was read.
    pub fn of(ckpt: &Checkpoint) -> Manifest {
        let tensors = ckpt
            .tensors
            .iter()
            .map(|t| {
                let imp = t.tensor_impl();
                let storage = imp.storage();
                TensorEntry {
                    name: t.name().to_owned(),
                    dtype: imp.dtype().name().to_owned(),
                    shape: imp.layout().sizes().to_vec(),
                    strides: Some(imp.layout().strides().to_vec()),
                    device: storage.device().to_string(),
                    requires_grad: imp.requires_grad(),
                    storage: Some(storage.key().to_owned()),
                    storage_offset: Some(imp.layout().storage_offset()),
                }
            })
            .collect();
        Manifest {
            kind: KIND.to_owned(),
            version: 1,
            source: ckpt.path.display().to_string(),
            tensors,
        }
    }

    /// Reads a layout file's text, refusing other JSON and names listed twice.
    pub fn from_json(text: &str) -> Result<Manifest, ManifestError> {
        let manifest: Manifest = serde_json::from_str(text)?;
        if manifest.kind != KIND {
            return Err(ManifestError::Kind(manifest.kind));
        }
        if manifest.version > 1 {
            return Err(ManifestError::Version(manifest.version));
        }
        let mut seen = std::collections::HashSet::new();
        for t in &manifest.tensors {
            if !seen.insert(t.name.as_str()) {
                return Err(ManifestError::Duplicate(t.name.clone()));
            }
        }
        Ok(manifest)
    }

    /// Whether `text` claims to be a layout file (so a caller can tell it from a checkpoint
    /// without guessing by extension).
    pub fn looks_like(text: &[u8]) -> bool {
        #[derive(Deserialize)]
        struct Kind {
            kind: String,
        }
        serde_json::from_slice::<Kind>(text).is_ok_and(|k| k.kind == KIND)
    }

    /// Entries by name.
    pub fn by_name(&self) -> BTreeMap<&str, &TensorEntry> {
        self.tensors.iter().map(|t| (t.name.as_str(), t)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_round_trips_and_other_json_is_refused() {
        let m = Manifest {
            kind: KIND.into(),
            version: 1,
            source: "m.pt".into(),
            tensors: vec![TensorEntry {
                name: "w".into(),
                dtype: "float32".into(),
                shape: vec![2, 3],
                strides: Some(vec![3, 1]),
                device: "cpu".into(),
                requires_grad: false,
                storage: Some("0".into()),
                storage_offset: Some(0),
            }],
        };
        let text = serde_json::to_string(&m).unwrap();
        assert!(Manifest::looks_like(text.as_bytes()));
        assert_eq!(Manifest::from_json(&text).unwrap(), m);

        let other = r#"{"kind": "sarif", "version": 1, "tensors": []}"#;
        assert!(!Manifest::looks_like(other.as_bytes()));
        assert!(matches!(
            Manifest::from_json(other),
            Err(ManifestError::Kind(k)) if k == "sarif"
        ));
        let twice = r#"{"kind": "tensorplay-layout", "version": 1, "tensors": [
            {"name": "a", "dtype": "float32", "shape": [1], "device": "cpu"},
            {"name": "a", "dtype": "float32", "shape": [1], "device": "cpu"}]}"#;
        assert!(matches!(
            Manifest::from_json(twice),
            Err(ManifestError::Duplicate(n)) if n == "a"
        ));
        let minimal = r#"{"kind": "tensorplay-layout", "version": 1, "tensors": [
            {"name": "a", "dtype": "float32", "shape": [1], "device": "cpu"}]}"#;
        let m = Manifest::from_json(minimal).unwrap();
        assert_eq!(m.tensors[0].strides, None);
        assert!(!m.tensors[0].requires_grad);
    }
}
