//! joblib files (`joblib.dump`, scikit-learn's usual persistence): a pickle stream in which
//! each NumPy array is a `NumpyArrayWrapper` followed by the array's bytes ([`wrapper`]),
//! read by the non-executing pickle machine as `joblib.load`'s `NumpyUnpickler` reads them.
//!
//! An uncompressed file is a pickle: the plain pickle reader reads it with [`Arrays`] as its
//! [`Inline`](crate::pickle::Inline), and it is a joblib file when an array was read so. A
//! compressed one (`compress=` or a `.z`, `.gz`, `.bz2`, `.xz`, `.lzma`, `.lz4` name) is told
//! by its compressor's magic, as joblib's `_detect_compressor` tells it: zlib and gzip are
//! inflated within the read's memory budget and read as an uncompressed file; bz2, xz, lzma,
//! lz4 and joblib < 0.9.3's `ZF` format are refused naming the compressor (tensorplay carries
//! no decompressor for them, and a file it cannot read is never passed).

mod compressed;
mod wrapper;

pub(crate) use compressed::{read_into, refused_compressor, sniff_compressed};
pub(crate) use wrapper::Arrays;

use super::torch::{StorageRecord, StorageSource};
use crate::error::{Error, Result};
use crate::load::limits::Meter;
use crate::load::torch::byteswap;
use crate::pickle::InlineArray;
use crate::{DType, DataPtr, HostBuffer};
use std::collections::HashMap;
use std::sync::Arc;

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
        let array = self.arrays.get(&record.key).ok_or_else(|| Error::Joblib {
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
