//! Keras v3 `.keras` archives (`model.save`): a zip with `metadata.json`, `config.json` and
//! `model.weights.h5` (or `.npz`) at its root. `keras.saving.load_model` reads `config.json`
//! with Python's zipfile and builds every object it names, then the weights; this reader keeps
//! the config, parsed, and lists the other members: the audit judges what the config names.
//! No weights are read (HDF5 has no pure-Rust reader of Keras' layout: docs/formats.md).
//! Every other pickle or `.npy` member is judged as `np.load` would read it.

use crate::error::Result;
use crate::keras::{KerasMember, KerasModel};
use crate::load::table::{Accepts, Row, ZipKind};
use crate::load::torch::archive::{self, audit_other_pickles, Archive};
use crate::load::Sink;
use crate::pickle::Loader;
use crate::Format;

const CONFIG: &str = "config.json";
const METADATA: &str = "metadata.json";

/// Keras v3 archives, by their records: a `config.json` at the root, which no torch archive
/// has (torch's reader needs every entry under one folder).
pub(crate) const ROW: Row = Row {
    what: "a Keras v3 archive",
    loader: "keras.saving.load_model",
    extensions: &["keras"],
    accepts: Accepts::Records(ZipKind {
        archive: archive::flat_archive,
        claims: is_keras,
        read: read_archive,
    }),
};

/// Whether the archive has the `config.json` at its root that `load_model` reads.
pub(crate) fn is_keras(archive: &Archive<'_>) -> Result<bool> {
    Ok(archive.zip.entries().iter().any(|e| e.name == CONFIG))
}

/// Reads the archive's config and metadata through `sink`.
pub(crate) fn read_archive(mut archive: Archive<'_>, sink: &mut Sink<'_>) -> Result<Format> {
    let config = json(&mut archive, CONFIG)?
        .ok_or_else(|| archive.err(CONFIG, "the archive has no config.json"))?;
    if !config.is_object() {
        return Err(archive.err(CONFIG, "the config is not a JSON object"));
    }
    let keras_version = match json(&mut archive, METADATA)? {
        None => None,
        Some(serde_json::Value::Object(fields)) => match fields.get("keras_version") {
            None => None,
            Some(serde_json::Value::String(v)) => Some(v.clone()),
            Some(_) => return Err(archive.err(METADATA, "keras_version is not a string")),
        },
        Some(_) => return Err(archive.err(METADATA, "the metadata is not a JSON object")),
    };
    let members = archive
        .zip
        .entries()
        .iter()
        .filter(|e| e.name != CONFIG && e.name != METADATA)
        .map(|e| KerasMember {
            name: e.name.clone(),
            size: e.size,
        })
        .collect();
    // `np.load` opens any zip: its pickles and object arrays are judged as it reads them.
    audit_other_pickles(&archive, Loader::Python, sink)?;
    sink.set_keras(KerasModel {
        config: Some(config),
        keras_version,
        members,
    });
    Ok(Format::Keras)
}

/// A member parsed as JSON, or `None` when the archive has no such member.
fn json(archive: &mut Archive<'_>, name: &str) -> Result<Option<serde_json::Value>> {
    let Some(index) = archive.zip.entries().iter().position(|e| e.name == name) else {
        return Ok(None);
    };
    let bytes = archive.read_at(index)?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| archive.err(name, format!("not JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use crate::load::open;
    use crate::Format;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/keras")
            .join(name)
    }

    #[test]
    fn a_keras_archive_keeps_its_config_and_lists_its_weights() {
        let ckpt = open(&fixture("plain_sequential.keras")).unwrap();
        assert_eq!(ckpt.format, Format::Keras);
        let model = ckpt.keras.expect("a Keras model");
        assert_eq!(model.config.expect("a config")["class_name"], "Sequential");
        assert_eq!(model.keras_version.as_deref(), Some("3.15.1"));
        let names: Vec<&str> = model.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["model.weights.h5"]);
        assert!(model.members[0].size > 0);
        assert!(ckpt.tensors.is_empty());
        assert!(ckpt.unsafe_globals.is_empty());
    }

    #[test]
    fn a_config_that_is_not_json_is_refused_naming_the_member() {
        let bytes = std::fs::read(fixture("plain_sequential.keras")).unwrap();
        // Same length: the zip's sizes still hold; the CRC is not checked for stored members
        // read whole (the zip reader checks it: either refusal names config.json or the zip).
        let mut bent = bytes.clone();
        let at = bent
            .windows(11)
            .position(|w| w == b"{\"module\": ")
            .expect("the config's first bytes");
        bent[at] = b'!';
        let dir = std::env::temp_dir().join(format!("tensorplay-keras-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bent.keras");
        std::fs::write(&path, bent).unwrap();
        let err = open(&path).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(err.contains("bent.keras"), "{err}");
        assert!(
            err.contains("config.json") || err.contains("CRC") || err.contains("crc"),
            "{err}"
        );
    }
}
