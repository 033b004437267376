//! Which reader a zip archive needs. Its first bytes cannot tell: `torch.save`,
//! `torch.jit.save` and `torch.export.save` all write PyTorch's zip, records in their own
//! order. Its records can, as torch's `is_pt2_package` decides: an `archive_format` record
//! holding `pt2` marks a `torch.export` archive; any other is `torch.load`'s.

use super::{pt2, torch_zip, Parts};
use crate::error::Result;
use crate::{Format, HostBuffer};
use std::sync::Arc;

/// Opens the archive once and hands it to the reader its records call for.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<Format> {
    let archive = torch_zip::open_archive(buffer, std::mem::take(&mut parts.meter))?;
    if pt2::is_pt2(&archive)? {
        pt2::read_archive(archive, parts)
    } else {
        torch_zip::read_archive(archive, parts)
    }
}
