//! HDF5 files, as Keras' legacy `.h5` models (`model.save("m.h5")`, the config in the root's
//! `model_config` attribute) and weights files (`model.save_weights`) are written, and as h5py
//! opens any. tensorplay has no HDF5 reader (docs/formats.md): such a file is recognised by its
//! signature and kept as a Keras model whose config was not read, which the audit fails
//! (TP716): a legacy model's config can name a Lambda layer, and it was not judged.

use crate::error::Result;
use crate::keras::KerasModel;
use crate::load::table::{Accepts, FileReader, FileRule, Row};
use crate::load::{Sink, Sniffed};
use crate::{Format, HostBuffer};
use std::sync::Arc;

/// The format signature an HDF5 file begins with (h5py writes no user block before it).
const SIGNATURE: &[u8] = b"\x89HDF\r\n\x1a\n";

/// HDF5 files, by their signature at the first byte (which no other loader's input begins
/// with). A file with a user block, its signature further on, is read by whatever else accepts
/// its bytes, and failed as corrupt when named `.h5` and nothing does.
pub(crate) const ROW: Row = Row {
    what: "an HDF5 file",
    loader: "keras.saving.load_model (.h5), h5py.File",
    extensions: &["h5", "hdf5"],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Format(Format::Hdf5),
        accepts: |prefix| prefix.starts_with(SIGNATURE),
        read: Some(FileReader {
            read: read_into,
            index: Format::Hdf5,
            reads_pickle: false,
        }),
    }),
};

/// Keeps the file as a Keras model whose config was not read.
fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let _ = buffer;
    sink.set_keras(KerasModel {
        config: None,
        keras_version: None,
        members: Vec::new(),
    });
    Ok(Format::Hdf5)
}

#[cfg(test)]
mod tests {
    use crate::load::open;
    use crate::Format;

    #[test]
    fn an_hdf5_file_is_kept_with_its_config_not_read() {
        let dir = std::env::temp_dir().join(format!("tensorplay-hdf5-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.h5");
        let mut bytes = super::SIGNATURE.to_vec();
        bytes.extend([0u8; 88]);
        std::fs::write(&path, bytes).unwrap();
        let ckpt = open(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(ckpt.format, Format::Hdf5);
        let model = ckpt.keras.expect("kept as a Keras model");
        assert!(model.config.is_none());
    }
}
