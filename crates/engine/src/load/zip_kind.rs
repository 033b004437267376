//! Which reader a zip archive needs. Its first bytes cannot tell: `torch.save`,
//! `torch.jit.save` and `torch.export.save` all write PyTorch's zip, records in their own
//! order. Its records can, as torch decides: an `archive_format` record holding `pt2` marks a
//! `torch.export` archive (`is_pt2_package`); an archive without a folder but with a root
//! `version` record is one from before torch 2.7 (`torch.export.load`'s zipfile fallback);
//! any other is `torch.load`'s.

use super::zip::globals_of_every_pickle;
use super::{pt2, pt2_flat, torch_zip, Parts};
use crate::error::{Error, Result};
use crate::{Format, HostBuffer};
use std::sync::Arc;

/// Opens the archive once and hands it to the reader its records call for. An archive
/// refused as ambiguous names the globals of every pickle any reading of it could run.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<Format> {
    let budget = parts.meter.pickle_budget();
    read(buffer, parts).map_err(|e| match e {
        Error::AmbiguousArchive { .. } => {
            let globals = globals_of_every_pickle(buffer.source(), buffer.bytes(), &budget);
            e.with_unsafe_globals(globals)
        }
        e => e,
    })
}

fn read(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<Format> {
    let meter = std::mem::take(&mut parts.meter);
    let zip = torch_zip::open_zip(buffer, &meter)?;
    if pt2_flat::is_flat_export(&zip) {
        return pt2_flat::read_archive(torch_zip::flat_archive(buffer, zip, meter), parts);
    }
    let archive = torch_zip::archive_of(buffer, zip, meter)?;
    if pt2::is_pt2(&archive)? {
        pt2::read_archive(archive, parts)
    } else {
        torch_zip::read_archive(archive, parts)
    }
}
