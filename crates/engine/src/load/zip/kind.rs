//! Which reader a zip archive needs. Its first bytes cannot tell: `torch.save`,
//! `torch.jit.save` and `torch.export.save` all write PyTorch's zip, records in their own
//! order, and `np.savez` writes a zip of `.npy` members. Its records can: members all named
//! `*.npy` make an `.npz` (which no torch archive is); then, as torch decides: an
//! `archive_format` record holding `pt2` marks a
//! `torch.export` archive (`is_pt2_package`); an archive without a folder but with a root
//! `version` record is one from before torch 2.7 (`torch.export.load`'s zipfile fallback);
//! any other is `torch.load`'s.

use super::{globals_of_every_pickle, Zip};
use crate::error::{Error, Result};
use crate::load::limits::Meter;
use crate::load::numpy;
use crate::load::pt2::{self, flat};
use crate::load::torch::archive::{self, Archive};
use crate::load::Sink;
use crate::{Format, HostBuffer};
use std::sync::Arc;

/// Opens the archive once and hands it to the reader its records call for. An archive
/// refused as ambiguous names the globals of every pickle any reading of it could run.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let budget = sink.meter().pickle_budget();
    read(buffer, sink).map_err(|e| match e {
        Error::AmbiguousArchive { .. } => {
            let globals = globals_of_every_pickle(buffer.source(), buffer.bytes(), &budget);
            e.with_unsafe_globals(globals)
        }
        e => e,
    })
}

/// One kind of zip archive: how its records are resolved, whether an archive is of this kind,
/// and its reader.
struct ZipKind {
    /// The archive as the kind's loader opens it (under a folder, or from the root).
    archive: for<'a> fn(&'a Arc<HostBuffer>, Zip<'a>, &'a Meter) -> Result<Archive<'a>>,
    /// Whether the archive is of this kind, as torch decides.
    claims: fn(&Archive<'_>) -> Result<bool>,
    read: fn(Archive<'_>, &mut Sink<'_>) -> Result<Format>,
}

/// The zip table: the first row that claims an archive reads it; the last claims any.
#[rustfmt::skip]
const ZIP_KINDS: [ZipKind; 4] = [
    // np.savez: every member a `.npy`, at the root or not (before the rows that need a folder).
    ZipKind { archive: flat,                claims: numpy::is_npz,        read: numpy::read_archive },
    // torch.export before 2.7: no folder, a root `version` record.
    ZipKind { archive: flat,                claims: flat::is_flat_export, read: flat::read_archive },
    // torch.export: an `archive_format` record holding `pt2`.
    ZipKind { archive: archive::archive_of, claims: pt2::is_pt2,          read: pt2::read_archive },
    // torch.save and torch.jit.save, which the archive's records tell apart.
    ZipKind { archive: archive::archive_of, claims: |_| Ok(true),         read: archive::read_archive },
];

fn flat<'a>(buffer: &'a Arc<HostBuffer>, zip: Zip<'a>, meter: &'a Meter) -> Result<Archive<'a>> {
    Ok(archive::flat_archive(buffer, zip, meter))
}

fn read(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let meter = sink.meter();
    let mut zip = archive::open_zip(buffer, meter)?;
    for kind in &ZIP_KINDS {
        let archive = (kind.archive)(buffer, zip, meter)?;
        if (kind.claims)(&archive)? {
            return (kind.read)(archive, sink);
        }
        zip = archive.zip;
    }
    Err(Error::Archive {
        path: buffer.source().to_owned(),
        part: "zip".into(),
        detail: "no reader claims the archive".into(),
    })
}
