//! A Keras model a `.keras` archive (or a legacy `.h5` file, unread) carries: its `config.json`, which names every class and
//! function `keras.saving.load_model` would build, and the archive's other members. Readers
//! keep the config as parsed JSON, never resolving a name in it; the audit judges it.

/// One Keras v3 archive's model.
#[derive(Debug, Clone, PartialEq)]
pub struct KerasModel {
    /// `config.json`, parsed: the object tree `deserialize_keras_object` walks. `None` for an
    /// HDF5 file (a legacy `.h5` model keeps its config in an HDF5 attribute, not read).
    pub config: Option<serde_json::Value>,
    /// `metadata.json`'s `keras_version`, when the archive has one.
    pub keras_version: Option<String>,
    /// Every other member (the weights, `model.weights.h5` or `.npz`, and anything else), in
    /// archive order; none is read as weights.
    pub members: Vec<KerasMember>,
}

/// A member of the archive besides its config and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KerasMember {
    /// Its name in the archive.
    pub name: String,
    /// Its size, uncompressed.
    pub size: u64,
}
