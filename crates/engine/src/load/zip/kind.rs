//! Which reader a zip archive needs. Its first bytes cannot tell: `torch.save`,
//! `torch.jit.save` and `torch.export.save` all write PyTorch's zip, records in their own
//! order, and `np.savez` writes a zip of `.npy` members. Its records can: members all named
//! `*.npy` make an `.npz` (which no torch archive is); then, as torch decides: an
//! `archive_format` record holding `pt2` marks a
//! `torch.export` archive (`is_pt2_package`); an archive without a folder but with a root
//! `version` record is one from before torch 2.7 (`torch.export.load`'s zipfile fallback);
//! a root `config.json` is what `keras.saving.load_model` reads (a `.keras` archive, which
//! torch's reader refuses: its entries are under no folder); any other is `torch.load`'s.

use super::globals_of_every_pickle;
use crate::error::{Error, Result};
use crate::load::table::{zip_kinds, Accepts, FileReader, FileRule, Row};
use crate::load::torch::archive;
use crate::load::{Sink, Sniffed};
use crate::{Format, HostBuffer};
use std::sync::Arc;

/// Opens the archive once and hands it to the reader its records call for. An archive
/// refused (as ambiguous, for a member its reader cannot read, or over the budget) names the
/// globals of every pickle any reading of it could run: another loader may read what this
/// reading stopped at (`np.load` the object arrays of a `torch.save` archive whose `data.pkl`
/// is cut short), and CPython reads on past what the budget refused (each pickle is then
/// walked, building nothing, from where its budget ran out).
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let budget = sink.meter().pickle_budget();
    read(buffer, sink).map_err(|e| {
        let globals = globals_of_every_pickle(buffer.source(), buffer.bytes(), &budget);
        e.with_unsafe_globals(globals)
    })
}

/// A zip archive, as every loader that opens one tells it: `torch.load` by the local header
/// its first bytes must be (`_is_zipfile`), `np.load` by that or an end record; which reader
/// then reads it is the table's zip kinds' to say.
pub(crate) const ROW: Row = Row {
    what: "a zip archive",
    loader: "torch.load, np.load",
    extensions: &[],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Zip,
        accepts: |prefix| {
            prefix.given(4, |bytes| {
                bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06")
            })
        },
        read: Some(FileReader {
            read: read_into,
            index: Format::PytorchIndex,
            reads_pickle: false,
        }),
    }),
};

fn read(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let meter = sink.meter();
    let mut zip = archive::open_zip(buffer, meter)?;
    for kind in zip_kinds() {
        let archive = (kind.archive)(buffer, zip, meter)?;
        if (kind.claims)(&archive)? {
            return (kind.read)(archive, sink);
        }
        zip = archive.zip;
    }
    Err(Error::Malformed {
        path: buffer.source().to_owned(),
        part: "zip".into(),
        detail: "no reader claims the archive".into(),
    })
}
