//! `torch.export` archives as torch before 2.7 wrote them: a zip with no folder holding
//! `serialized_exported_program.json`, `serialized_state_dict.pt`, `serialized_constants.pt`,
//! `serialized_example_inputs.pt` and `version`. torch 2.9.1's `torch.export.load` still reads
//! them, with Python's zipfile, once its archive reader has refused the missing folder: by exact
//! name, the payloads as nested `torch.save` archives (an empty one is an empty dict).

use super::ModelReader;
use crate::error::Result;
use crate::load::table::{Accepts, Row, ZipKind};
use crate::load::torch::archive::{self, Archive};
use crate::load::Sink;
use crate::pickle::Loader;
use crate::Format;
use std::collections::HashSet;

const VERSION: &str = "version";
const PROGRAM: &str = "serialized_exported_program.json";
const EXAMPLE_INPUTS: &str = "serialized_example_inputs.pt";
/// Each payload and the deprecated name torch also takes for it; of two, the later entry wins.
const STATE_DICT: [&str; 2] = ["serialized_state_dict.pt", "serialized_state_dict.json"];
const CONSTANTS: [&str; 2] = ["serialized_constants.pt", "serialized_constants.json"];
/// The major schema version torch 2.9.1 accepts (`SCHEMA_VERSION[0]`).
const SCHEMA_MAJOR: &str = "8";

/// `torch.export` archives before torch 2.7, by their records (ahead of the rows that need a
/// folder).
pub(crate) const ROW: Row = Row {
    what: "a torch.export archive (before torch 2.7)",
    loader: "torch.export.load",
    extensions: &[],
    accepts: Accepts::Records(ZipKind {
        archive: archive::flat_archive,
        claims: is_flat_export,
        read: read_archive,
    }),
};

/// Whether `zip` is such an archive: its first entry outside any folder (PyTorch's reader
/// refuses it) and a `version` record at its root (torch's zipfile fallback needs one).
pub(crate) fn is_flat_export(archive: &Archive<'_>) -> Result<bool> {
    let zip = &archive.zip;
    Ok(zip
        .entries()
        .first()
        .is_some_and(|first| !first.name.contains('/'))
        && zip.entries().iter().any(|e| e.name == VERSION))
}

/// The entry Python's zipfile finds for `name`: the one named exactly so.
fn exact(archive: &Archive<'_>, name: &str) -> bool {
    archive.entry(name).is_some_and(|e| e.name == name)
}

/// The later in directory order of the entries named `names`.
fn last_of(archive: &Archive<'_>, names: [&'static str; 2]) -> Option<&'static str> {
    let position = |name: &str| archive.zip.entries().iter().position(|e| e.name == name);
    names
        .into_iter()
        .filter_map(|n| position(n).map(|p| (p, n)))
        .max()
        .map(|(_, n)| n)
}

/// Reads the archive through `sink`.
pub(crate) fn read_archive(mut archive: Archive<'_>, sink: &mut Sink<'_>) -> Result<Format> {
    let version = archive.read(VERSION)?.unwrap_or_default().into_owned();
    let fields: Vec<&[u8]> = version.split(|&b| b == b'.').collect();
    if fields.len() != 2 || fields.first() != Some(&SCHEMA_MAJOR.as_bytes()) {
        let shown = String::from_utf8_lossy(version.get(..32).unwrap_or(&version)).into_owned();
        return Err(archive.err(
            VERSION,
            format!("schema version {shown:?} is not the {SCHEMA_MAJOR}.x torch 2.9.1 reads"),
        ));
    }
    let state_dict = last_of(&archive, STATE_DICT);
    let constants = last_of(&archive, CONSTANTS);
    for (name, found) in [
        (PROGRAM, exact(&archive, PROGRAM)),
        (STATE_DICT[0], state_dict.is_some()),
        (CONSTANTS[0], constants.is_some()),
        (EXAMPLE_INPUTS, exact(&archive, EXAMPLE_INPUTS)),
    ] {
        if !found {
            return Err(archive.err(name, "record is missing"));
        }
    }
    let mut seen = HashSet::new();
    let mut reader = ModelReader {
        archive: &mut archive,
        sink,
        model: "model",
        seen: &mut seen,
    };
    let signature = reader.signature(PROGRAM)?;
    let first = reader.sink.tensor_mark();
    for member in [state_dict, constants].into_iter().flatten() {
        payload(&mut reader, member, true)?;
    }
    reader.check_signature(first, &signature, PROGRAM)?;
    payload(&mut reader, EXAMPLE_INPUTS, false)?;
    // Any other pickle in the archive is audited as torch.load's would be.
    archive::audit_other_pickles(reader.archive, Loader::Python, reader.sink)?;
    Ok(Format::Pt2)
}

/// One nested `torch.save` payload; torch takes an empty one for an empty dict.
fn payload(reader: &mut ModelReader<'_, '_, '_>, member: &str, keep: bool) -> Result<()> {
    let bytes = reader
        .archive
        .read(member)?
        .unwrap_or_default()
        .into_owned();
    if bytes.is_empty() {
        return Ok(());
    }
    reader.nested(member, bytes, keep)
}
