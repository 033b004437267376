//! joblib files (`joblib.dump`, scikit-learn's usual persistence): a pickle stream in which
//! each NumPy array is a `NumpyArrayWrapper` followed by the array's bytes ([`wrapper`]),
//! read by the non-executing pickle machine as `joblib.load`'s `NumpyUnpickler` reads them.
//!
//! An uncompressed file is a pickle: the plain pickle reader reads it with [`Arrays`] as its
//! [`Inline`](crate::pickle::Inline), and it is a joblib file when an array was read so. A
//! compressed one (`compress=` or a `.z`, `.gz`, `.bz2`, `.xz`, `.lzma`, `.lz4` name) is told
//! by its compressor's magic, as joblib's `_detect_compressor` tells it, whatever its name:
//! zlib, gzip, bz2, xz, lzma-alone, lz4 frames and joblib < 0.9.3's `ZF` format are each
//! inflated within the read's memory budget (a stream inflating past it is refused) and read
//! as an uncompressed file; [`compressed_pickle`] tells, inflating only as far as it takes,
//! whether such a file holds a pickle `joblib.load` would run.

mod compressed;
mod wrapper;

pub(crate) use compressed::{compressed_pickle, compressor, read_into};
pub(crate) use wrapper::{names_a_wrapper, Arrays};

use super::table::{Accepts, FileReader, FileRule, Row};
use super::torch::{StorageRecord, StorageSource};
use crate::error::{Error, Result};
use crate::load::limits::Meter;
use crate::load::pickle_start::Begins;
use crate::load::sniff::Prefix;
use crate::load::torch::byteswap;
use crate::load::Sniffed;
use crate::pickle::InlineArray;
use crate::{DType, DataPtr, Format, HostBuffer};
use std::collections::HashMap;
use std::sync::Arc;

/// `joblib.dump(..., compress=...)`: a stream of a compressor `joblib.load` picks by magic
/// that inflates to a pickle (uncompressed files are the plain pickle row's).
pub(crate) const ROW: Row = Row {
    what: "a compressed joblib file",
    loader: "joblib.load",
    extensions: &["joblib"],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Format(Format::Joblib),
        accepts,
        read: Some(FileReader {
            read: read_into,
            index: Format::Joblib,
            reads_pickle: false,
        }),
    }),
};

/// Whether the file is a compressed stream that begins a pickle, or may (not shown within what
/// a look may inflate: read, within the budget, or refused).
/// Of a file's first bytes, only a compressor's magic refuses it; a stream that may be one is
/// decided on the whole file (which its reader inflates whole anyway).
fn accepts(prefix: Prefix<'_>) -> Option<bool> {
    if !prefix.whole {
        return match prefix.given(MAX_MAGIC, |bytes| compressor(bytes).is_some())? {
            true => None,
            false => Some(false),
        };
    }
    Some(
        compressed_pickle(prefix.bytes, MAX_SNIFF_INFLATE)
            .is_some_and(|begins| begins != Begins::NotPickle),
    )
}

/// The longest magic a compressor joblib reads begins with.
const MAX_MAGIC: usize = 16;

/// Inflated bytes a compressed file may take to show whether it holds a pickle.
const MAX_SNIFF_INFLATE: u64 = 64 << 20;

/// The storages of a joblib stream: each array's bytes where they lie in `buffer` (the file,
/// or its inflated stream), swapped onto the heap when big-endian.
pub(crate) struct InlineStorages<'a> {
    buffer: &'a Arc<HostBuffer>,
    meter: &'a Meter,
    arrays: HashMap<String, InlineArray>,
}

impl<'a> InlineStorages<'a> {
    pub(crate) fn new(
        buffer: &'a Arc<HostBuffer>,
        meter: &'a Meter,
        arrays: Vec<InlineArray>,
    ) -> Self {
        let arrays = arrays.into_iter().map(|a| (a.key(), a)).collect();
        InlineStorages {
            buffer,
            meter,
            arrays,
        }
    }
}

impl StorageSource for InlineStorages<'_> {
    fn data_ptr(
        &mut self,
        record: &StorageRecord,
        dtype: DType,
        nbytes: u64,
    ) -> Result<Option<DataPtr>> {
        let path = self.buffer.source();
        let array = self
            .arrays
            .get(&*record.key)
            .ok_or_else(|| Error::Malformed {
                path: path.to_owned(),
                part: format!("storage '{}'", record.key),
                detail: "no array of the stream lies there".into(),
            })?;
        let range = array.start..array.start.saturating_add(nbytes);
        if !array.swap {
            return DataPtr::host(Arc::clone(self.buffer), range).map(Some);
        }
        self.meter.hold(path, nbytes, || {
            format!("the big-endian array at byte {}, byte-swapped", array.start)
        })?;
        let mut own = usize::try_from(range.start)
            .ok()
            .zip(usize::try_from(range.end).ok())
            .and_then(|(start, end)| self.buffer.bytes().get(start..end))
            .unwrap_or_default()
            .to_vec();
        byteswap(&mut own, dtype);
        Ok(Some(DataPtr::heap(path, own)))
    }
}
