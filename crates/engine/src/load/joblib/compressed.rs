//! Compressed joblib files, told by the magic joblib 1.6.0's `_detect_compressor` checks
//! (`joblib/compressor.py`): zlib and gzip are inflated (flate2), within the read's memory
//! budget, and read as an uncompressed joblib stream; the others are refused naming the
//! compressor.

use crate::error::{Error, Result};
use crate::load::pickle_file;
use crate::load::pickle_start::begins_pickle;
use crate::load::Sink;
use crate::{Format, HostBuffer};
use flate2::bufread::{MultiGzDecoder, ZlibDecoder};
use std::io::Read;
use std::sync::Arc;

/// A compressor joblib writes with, by the magic its file begins with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compressor {
    Zlib,
    Gzip,
    /// One tensorplay does not decompress: its name as `compress=` takes it.
    Refused(&'static str),
}

/// The magics in `_detect_compressor`'s order (`ZF` first: joblib < 0.9.3's own format).
const MAGICS: [(&[u8], Compressor); 7] = [
    (b"ZF", Compressor::Refused("ZF (joblib before 0.9.3)")),
    (b"\x78", Compressor::Zlib),
    (b"\x1f\x8b", Compressor::Gzip),
    (b"BZ", Compressor::Refused("bz2")),
    (b"\xfd\x37\x7a\x58\x5a", Compressor::Refused("xz")),
    (b"\x5d\x00", Compressor::Refused("lzma")),
    (b"\x04\x22\x4d\x18", Compressor::Refused("lz4")),
];

/// The compressor whose magic `prefix` begins with, as joblib tells it.
pub(crate) fn compressor(prefix: &[u8]) -> Option<Compressor> {
    MAGICS
        .iter()
        .find(|(magic, _)| prefix.starts_with(magic))
        .map(|&(_, c)| c)
}

/// Whether `prefix` is a zlib or gzip stream whose first bytes inflate to the start of a
/// pickle: a compressed joblib file, as far as its first bytes tell. Other compressed data
/// (a `.gz` of anything else) is not one.
pub(crate) fn sniff_compressed(prefix: &[u8]) -> bool {
    let mut head = Vec::with_capacity(16);
    let read = match compressor(prefix) {
        Some(Compressor::Zlib) => ZlibDecoder::new(prefix).take(16).read_to_end(&mut head),
        Some(Compressor::Gzip) => MultiGzDecoder::new(prefix).take(16).read_to_end(&mut head),
        _ => return false,
    };
    // The prefix is cut short of the stream's end: an error after some output is expected.
    let _ = read;
    begins_pickle(&head)
}

/// What a file of refused compression is, for messages about unknown content.
pub(crate) fn refused_compressor(prefix: &[u8]) -> Option<&'static str> {
    match compressor(prefix)? {
        Compressor::Refused(name) => Some(name),
        Compressor::Zlib | Compressor::Gzip => None,
    }
}

/// Reads a zlib- or gzip-compressed joblib file: inflated whole within the memory budget
/// (`joblib.load` inflates it as it reads; its arrays cannot be mapped), then read as an
/// uncompressed one. Positions in messages are offsets in the inflated stream.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let path = buffer.source();
    let bytes = buffer.bytes();
    let refuse = |detail: String| Error::Joblib {
        path: path.to_owned(),
        part: "compression".into(),
        detail,
    };
    let which = compressor(bytes);
    let meter = sink.meter();
    let room = meter.limits.max_memory.saturating_sub(meter.held());
    let mut inflated = Vec::new();
    let read = match which {
        Some(Compressor::Zlib) => ZlibDecoder::new(bytes)
            .take(room.saturating_add(1))
            .read_to_end(&mut inflated),
        Some(Compressor::Gzip) => MultiGzDecoder::new(bytes)
            .take(room.saturating_add(1))
            .read_to_end(&mut inflated),
        Some(Compressor::Refused(name)) => {
            return Err(refuse(format!(
                "compressed with {name}: tensorplay inflates zlib and gzip only (decompress \
                 it, or re-save it with compress=('zlib', 3))"
            )))
        }
        None => return Err(refuse("no compressor joblib writes begins the file".into())),
    };
    let name = match which {
        Some(Compressor::Gzip) => "gzip",
        _ => "zlib",
    };
    read.map_err(|e| refuse(format!("the {name} stream cannot be inflated: {e}")))?;
    let size = inflated.len() as u64;
    meter.hold(path, size, || format!("the inflated {name} stream"))?;
    let stream = HostBuffer::from_vec(path, inflated);
    pickle_file::read_streams(&stream, sink)?;
    Ok(Format::Joblib)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::ZlibEncoder;
    use std::io::Write;

    #[test]
    fn a_compressed_pickle_is_told_from_other_compressed_data() {
        let mut z = ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"\x80\x04\x95\x05\0\0\0\0\0\0\0K\x01.")
            .expect("write");
        let pickle = z.finish().expect("finish");
        assert!(sniff_compressed(&pickle));
        let mut z = ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(b"hello, world").expect("write");
        assert!(!sniff_compressed(&z.finish().expect("finish")));
        assert_eq!(refused_compressor(b"BZh91AY"), Some("bz2"));
        assert_eq!(refused_compressor(b"\x78\x9c"), None);
    }
}
