//! Compressed joblib files, told by the magic joblib 1.6.0's `_detect_compressor` checks
//! (`joblib/compressor.py`, `numpy_pickle_utils.py`) and inflated as `joblib.load` inflates
//! them: zlib and gzip (flate2), bz2 (bzip2's pure-Rust libbz2-rs-sys), xz and lzma-alone
//! (lzma-rust2), lz4 frames (lz4_flex), and joblib < 0.9.3's `ZF` format (a hex length, then
//! zlib: `numpy_pickle_compat.read_zfile`). Every inflation stops one byte past the room left
//! in the read's memory budget (or past a sniff's bound): a bomb is refused, never read whole.
//!
//! Where the decoders go past what `joblib.load` reads, they read more, never less: every
//! gzip member (joblib's `BinaryGzipFile` inflates the first and then spins on what follows),
//! every bz2 stream and lz4 frame (`BZ2File`, `LZ4FrameFile`), every stream of an xz or lzma
//! file, each told xz or lzma-alone by its first byte as liblzma's `FORMAT_AUTO` tells it
//! (`LZMAFile`); trailing bytes that begin no stream are ignored, as `_compression`'s
//! `DecompressReader` ignores them.

use crate::error::{Error, Result};
use crate::load::pickle_file;
use crate::load::pickle_start::{begins, Begins};
use crate::load::Sink;
use crate::{Format, HostBuffer};
use flate2::bufread::{MultiGzDecoder, ZlibDecoder};
use lzma_rust2::{Action, LzmaStream, Status, XzStream};
use std::io::{self, Read};
use std::sync::Arc;

/// A compressor joblib reads with, by the magic its file begins with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compressor {
    /// joblib < 0.9.3's own format: `ZF`, a hex length, a zlib stream.
    Zf,
    Zlib,
    Gzip,
    Bz2,
    Xz,
    /// lzma-alone (`FORMAT_ALONE`), as joblib's `LZMACompressorWrapper` writes it.
    Lzma,
    /// The lz4 frame format (`lz4.frame`), when the lz4 package is installed.
    Lz4,
}

impl Compressor {
    /// Its name, as `compress=` takes it.
    fn name(self) -> &'static str {
        match self {
            Compressor::Zf => "ZF (joblib before 0.9.3)",
            Compressor::Zlib => "zlib",
            Compressor::Gzip => "gzip",
            Compressor::Bz2 => "bz2",
            Compressor::Xz => "xz",
            Compressor::Lzma => "lzma",
            Compressor::Lz4 => "lz4",
        }
    }
}

/// The magics in `_detect_compressor`'s order (`ZF` first).
const MAGICS: [(&[u8], Compressor); 7] = [
    (b"ZF", Compressor::Zf),
    (b"\x78", Compressor::Zlib),
    (b"\x1f\x8b", Compressor::Gzip),
    (b"BZ", Compressor::Bz2),
    (b"\xfd\x37\x7a\x58\x5a", Compressor::Xz),
    (b"\x5d\x00", Compressor::Lzma),
    (b"\x04\x22\x4d\x18", Compressor::Lz4),
];

/// The compressor whose magic `prefix` begins with, as joblib tells it.
pub(crate) fn compressor(prefix: &[u8]) -> Option<Compressor> {
    MAGICS
        .iter()
        .find(|(magic, _)| prefix.starts_with(magic))
        .map(|&(_, c)| c)
}

/// A `ZF` header: the magic, then the inflated length as `hex()` writes it, left-justified
/// with spaces to `_MAX_LEN` = `len(hex(2**64))` = 19 bytes.
const ZF_HEADER: usize = 2 + 19;

/// Inflated bytes a sniff looks at first; it doubles them until the start of the stream
/// decides.
const FIRST_LOOK: usize = 64 << 10;

/// Inflated bytes handed to the decoder at a time.
const CHUNK: usize = 64 << 10;

/// Whether joblib.load would unpickle `bytes`: `Some(Begins::Pickle)` when a compressor's
/// magic begins the file and its stream inflates to the start of a pickle CPython runs;
/// `Some(Begins::NotPickle)` when it is compressed data of something else (or no stream of
/// that compressor at all: text that happens to begin with `x`); `Some(Begins::NeedMore)` when
/// it could not be decided within `max` inflated bytes, or the decoder stopped where CPython's
/// might not (the caller fails closed); `None` when no compressor magic begins the file.
///
/// The stream is inflated progressively (64 KiB, then doubling) until
/// [`begins`](crate::load::pickle_start::begins) decides, never past `max` bytes. Where the
/// stream ends (or breaks, as it would for CPython's decoder) inside the first opcode, it is
/// no pickle: CPython refuses a truncated first opcode before running anything.
pub(crate) fn compressed_pickle(bytes: &[u8], max: u64) -> Option<Begins> {
    let which = compressor(bytes)?;
    let limit = usize::try_from(max).unwrap_or(usize::MAX);
    let mut next = FIRST_LOOK;
    let mut decided = None;
    let mut inflated = Vec::new();
    let stopped = inflate(which, bytes, &mut inflated, limit, &mut |so_far| {
        if so_far.len() < next {
            return false;
        }
        next = next.saturating_mul(2);
        decided = Some(begins(so_far)).filter(|b| *b != Begins::NeedMore);
        decided.is_some()
    });
    if decided.is_some() {
        return decided;
    }
    Some(match (begins(&inflated), stopped) {
        (Begins::NeedMore, Ok(Stopped::Full)) => Begins::NeedMore,
        (Begins::NeedMore, Err(e)) if !fails_as_cpython(&e) => Begins::NeedMore,
        (Begins::NeedMore, _) => Begins::NotPickle,
        (seen, _) => seen,
    })
}

/// Reads a compressed joblib file: its stream inflated whole within the memory budget
/// (`joblib.load` inflates it as it reads; its arrays cannot be mapped), then read as an
/// uncompressed one. Positions in messages are offsets in the inflated stream.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let path = buffer.source();
    let bytes = buffer.bytes();
    let refuse = |detail: String| Error::Malformed {
        path: path.to_owned(),
        part: "compression".into(),
        detail,
    };
    let which = compressor(bytes)
        .ok_or_else(|| refuse("no compressor joblib writes begins the file".into()))?;
    let name = which.name();
    // read_zfile parses the length before it inflates anything: an unreadable one fails there.
    let zf_length = match which {
        Compressor::Zf => Some(zf_length(bytes).ok_or_else(|| {
            refuse(format!(
                "the ZF header's length field {:?} is no hexadecimal length (joblib.load \
                 fails reading it)",
                String::from_utf8_lossy(bytes.get(2..ZF_HEADER).unwrap_or_default())
            ))
        })?),
        _ => None,
    };
    let meter = sink.meter();
    let room = meter.limits.max_memory.saturating_sub(meter.held());
    // One byte past the room: a stream that reaches it is refused by the meter below.
    let limit = usize::try_from(room.saturating_add(1)).unwrap_or(usize::MAX);
    let mut inflated = Vec::new();
    let stopped = inflate(which, bytes, &mut inflated, limit, &mut |_| false)
        .map_err(|e| refuse(format!("the {name} stream cannot be inflated: {e}")))?;
    let size = inflated.len() as u64;
    meter.hold(path, size, || match stopped {
        Stopped::Full => format!("the inflated {name} stream (more than {room} bytes)"),
        _ => format!("the inflated {name} stream"),
    })?;
    if let Some(length) = zf_length.filter(|&length| length != size) {
        return Err(refuse(format!(
            "the ZF header gives {length} inflated bytes, the zlib stream holds {size} \
             (joblib.load asserts they are equal)"
        )));
    }
    let stream = HostBuffer::from_vec(path, inflated);
    pickle_file::read_streams(&stream, sink)?;
    Ok(Format::Joblib)
}

/// Where inflating stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// Every stream ended (or what followed them began none).
    End,
    /// The output reached its limit.
    Full,
    /// The caller's check said it had seen enough.
    Enough,
}

/// Inflates the file `bytes` (beginning with `which`'s magic) into `out` until its streams
/// end, `out` holds `limit` bytes, or `enough(out)` (asked after each chunk) says so. On an
/// error `out` holds what was inflated before it.
fn inflate(
    which: Compressor,
    bytes: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
    enough: &mut dyn FnMut(&[u8]) -> bool,
) -> io::Result<Stopped> {
    match which {
        Compressor::Zlib => pump(&mut ZlibDecoder::new(bytes), out, limit, enough),
        Compressor::Zf => pump(&mut ZlibDecoder::new(zf_stream(bytes)), out, limit, enough),
        Compressor::Gzip => pump(&mut MultiGzDecoder::new(bytes), out, limit, enough),
        Compressor::Bz2 => pump(&mut Bz2File::new(bytes), out, limit, enough),
        Compressor::Xz | Compressor::Lzma => pump(&mut LzmaFile::new(bytes), out, limit, enough),
        Compressor::Lz4 => pump(&mut Lz4File::new(bytes), out, limit, enough),
    }
}

/// Reads `reader` into `out` by chunks: see [`inflate`].
fn pump(
    reader: &mut dyn Read,
    out: &mut Vec<u8>,
    limit: usize,
    enough: &mut dyn FnMut(&[u8]) -> bool,
) -> io::Result<Stopped> {
    loop {
        let room = limit.saturating_sub(out.len());
        if room == 0 {
            return Ok(Stopped::Full);
        }
        let start = out.len();
        // Grown by what was inflated, never by a size the file states.
        out.resize(start + room.min(CHUNK), 0);
        let read = reader.read(&mut out[start..]);
        let n = *read.as_ref().unwrap_or(&0);
        out.truncate(start + n);
        read?;
        if n == 0 {
            return Ok(Stopped::End);
        }
        if enough(out) {
            return Ok(Stopped::Enough);
        }
    }
}

/// Whether a decoder's error is one CPython's decoder raises on the same bytes (corrupt or
/// cut data: `joblib.load` fails there too), rather than a limit of the decoder here.
fn fails_as_cpython(e: &io::Error) -> bool {
    let lz4 = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<lz4_flex::frame::Error>());
    match lz4 {
        // liblz4 reads a frame naming a dictionary (until a match reaches into it).
        Some(lz4_flex::frame::Error::DictionaryNotSupported) => false,
        Some(_) => true,
        None => matches!(
            e.kind(),
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
        ),
    }
}

/// The zlib stream of a `ZF` file, where `read_zfile` starts it: past the header, and past
/// one more space (joblib <= 0.8.4 under Python 2 wrote the header one byte wider; a zlib
/// stream never begins with a space).
fn zf_stream(bytes: &[u8]) -> &[u8] {
    let rest = bytes.get(ZF_HEADER..).unwrap_or_default();
    rest.strip_prefix(b" ").unwrap_or(rest)
}

/// The inflated length a `ZF` header gives, read as `int(field, 16)` reads it: ASCII
/// whitespace around, an optional `+`, an optional `0x`, hex digits with single underscores
/// between them. `None` where Python raises, or the length could never be inflated (a sign,
/// more than 64 bits).
fn zf_length(bytes: &[u8]) -> Option<u64> {
    let field = bytes.get(2..ZF_HEADER)?;
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c');
    let first = field.iter().position(|b| !space(b))?;
    let last = field.iter().rposition(|b| !space(b))?;
    let text = field.get(first..=last)?;
    let text = text.strip_prefix(b"+").unwrap_or(text);
    let (digits, prefixed) = match text.get(..2) {
        Some(b"0x" | b"0X") => (text.get(2..)?, true),
        _ => (text, false),
    };
    // `0x_f4` is read, `_f4` and `f4_` are not.
    let digits = if prefixed {
        digits.strip_prefix(b"_").unwrap_or(digits)
    } else {
        digits
    };
    if digits.is_empty() || digits.ends_with(b"_") || digits.starts_with(b"_") {
        return None;
    }
    let mut value = 0u64;
    let mut underscore = false;
    for &b in digits {
        if b == b'_' {
            if underscore {
                return None;
            }
            underscore = true;
            continue;
        }
        underscore = false;
        let digit = char::from(b).to_digit(16)?;
        value = value.checked_mul(16)?.checked_add(u64::from(digit))?;
    }
    Some(value)
}

/// The streams of a bz2 file as `bz2.BZ2File` reads them: one after another; bytes after a
/// stream on which a new decoder fails before giving anything are trailing data, ignored
/// (`_compression.DecompressReader` breaks on its `trailing_error` there).
struct Bz2File<'a> {
    /// The input not yet given to a decoder.
    rest: &'a [u8],
    stream: Option<bzip2::bufread::BzDecoder<&'a [u8]>>,
    /// Whether a stream before the current one ended.
    after_first: bool,
    /// Whether the current stream gave output.
    produced: bool,
}

impl<'a> Bz2File<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Bz2File {
            rest: bytes,
            stream: None,
            after_first: false,
            produced: false,
        }
    }
}

impl Read for Bz2File<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let stream = match &mut self.stream {
                Some(stream) => stream,
                None if self.rest.is_empty() => return Ok(0),
                None => {
                    self.produced = false;
                    self.stream
                        .insert(bzip2::bufread::BzDecoder::new(self.rest))
                }
            };
            match stream.read(buf) {
                Ok(0) if !buf.is_empty() => {
                    // The stream ended: the decoder consumed exactly its bytes.
                    if let Some(ended) = self.stream.take() {
                        self.rest = ended.into_inner();
                    }
                    self.after_first = true;
                }
                Ok(n) => {
                    self.produced |= n > 0;
                    return Ok(n);
                }
                Err(_) if self.after_first && !self.produced => {
                    self.rest = &[];
                    self.stream = None;
                    return Ok(0);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The streams of an xz or lzma file as `lzma.LZMAFile` reads them (`FORMAT_AUTO`): one
/// after another, each xz when its first byte is 0xfd and lzma-alone otherwise; bytes after
/// a stream on which a new decoder fails before giving anything are trailing data, ignored.
struct LzmaFile<'a> {
    bytes: &'a [u8],
    /// Where the input not yet given to a decoder begins.
    pos: usize,
    stream: Option<LzmaDecoder>,
    /// Whether a stream before the current one ended.
    after_first: bool,
    /// Whether the current stream gave output.
    produced: bool,
}

enum LzmaDecoder {
    Xz(Box<XzStream>),
    Alone(Box<LzmaStream>),
}

impl<'a> LzmaFile<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        LzmaFile {
            bytes,
            pos: 0,
            stream: None,
            after_first: false,
            produced: false,
        }
    }
}

impl Read for LzmaFile<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let rest = self.bytes.get(self.pos..).unwrap_or_default();
            let Some(stream) = self.stream.as_mut() else {
                if rest.is_empty() {
                    return Ok(0);
                }
                // No memory limit: the window grows with the output, which the caller bounds.
                self.stream = Some(if rest.first() == Some(&0xfd) {
                    LzmaDecoder::Xz(Box::new(XzStream::new(false)))
                } else {
                    LzmaDecoder::Alone(Box::new(LzmaStream::new_mem_limit(u32::MAX, None)))
                });
                self.produced = false;
                continue;
            };
            let result = match stream {
                LzmaDecoder::Xz(s) => s.process(rest, buf, Action::Finish),
                LzmaDecoder::Alone(s) => s.process(rest, buf, Action::Finish),
            };
            let result = match result {
                Ok(result) => result,
                // What follows a stream but begins none is trailing data.
                Err(_) if self.after_first && !self.produced => {
                    self.pos = self.bytes.len();
                    self.stream = None;
                    return Ok(0);
                }
                Err(e) => return Err(e),
            };
            self.pos = self.pos.saturating_add(result.bytes_consumed);
            self.produced |= result.bytes_produced > 0;
            if result.status == Status::StreamEnd {
                // An lzma-alone decoder takes all it is given: what lies past its end comes
                // back as unused input, just before `pos`.
                if let LzmaDecoder::Alone(s) = stream {
                    self.pos = self.pos.saturating_sub(s.unused_input().len());
                }
                self.stream = None;
                self.after_first = true;
            } else if result.bytes_consumed == 0 && result.bytes_produced == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the stream is cut short",
                ));
            }
            if result.bytes_produced > 0 {
                return Ok(result.bytes_produced);
            }
        }
    }
}

/// The frames of an lz4 file as `lz4.frame.LZ4FrameFile` reads them: one after another,
/// skippable frames skipped.
struct Lz4File<'a> {
    decoder: lz4_flex::frame::FrameDecoder<&'a [u8]>,
}

impl<'a> Lz4File<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Lz4File {
            decoder: lz4_flex::frame::FrameDecoder::new(bytes),
        }
    }
}

impl Read for Lz4File<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let before = self.decoder.get_ref().len();
            let e = match self.decoder.read(buf) {
                // A frame ended: the next one, if any, goes on (what is no frame fails).
                Ok(0) if !self.decoder.get_ref().is_empty() => {
                    if self.decoder.get_ref().len() == before {
                        return Ok(0);
                    }
                    continue;
                }
                Ok(n) => return Ok(n),
                Err(e) => e,
            };
            let skip = match e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<lz4_flex::frame::Error>())
            {
                Some(&lz4_flex::frame::Error::SkippableFrame(len)) => len,
                _ => return Err(e),
            };
            // The decoder has read the skippable frame's header; its data follows.
            let input = self.decoder.get_mut();
            *input = usize::try_from(skip)
                .ok()
                .and_then(|len| input.get(len..))
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "a skippable frame runs past the end of the file",
                    )
                })?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A whole pickle: PROTO 4, FRAME, BININT1 1, STOP.
    const PICKLE: &[u8] = b"\x80\x04\x95\x05\0\0\0\0\0\0\0K\x01.";

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(data).expect("write");
        z.finish().expect("finish")
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(data).expect("write");
        z.finish().expect("finish")
    }

    fn bz2(data: &[u8]) -> Vec<u8> {
        let mut z = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
        z.write_all(data).expect("write");
        z.finish().expect("finish")
    }

    fn xz(data: &[u8]) -> Vec<u8> {
        let options = lzma_rust2::XzOptions::with_preset(3);
        let mut z = lzma_rust2::XzWriter::new(Vec::new(), options).expect("xz");
        z.write_all(data).expect("write");
        z.finish().expect("finish")
    }

    /// lzma-alone as Python's `lzma.FORMAT_ALONE` writes it: unknown size, end marker.
    fn lzma(data: &[u8]) -> Vec<u8> {
        let options = lzma_rust2::LzmaOptions::with_preset(3);
        let mut z =
            lzma_rust2::LzmaWriter::new_use_header(Vec::new(), &options, None).expect("lzma");
        z.write_all(data).expect("write");
        z.finish().expect("finish")
    }

    fn lz4(data: &[u8]) -> Vec<u8> {
        let mut z = lz4_flex::frame::FrameEncoder::new(Vec::new());
        z.write_all(data).expect("write");
        z.finish().expect("finish")
    }

    /// `ZF`, the length as `hex()` writes it padded to 19 bytes, `extra` (a space or none),
    /// then zlib.
    fn zf(data: &[u8], extra: &[u8]) -> Vec<u8> {
        let mut out = format!("ZF{:<19}", format!("{:#x}", data.len())).into_bytes();
        out.extend(extra);
        out.extend(zlib(data));
        out
    }

    type Compress = fn(&[u8]) -> Vec<u8>;

    fn every_compressor() -> Vec<(&'static str, Compress)> {
        vec![
            ("zlib", zlib),
            ("gzip", gzip),
            ("bz2", bz2),
            ("xz", xz),
            ("lzma", lzma),
            ("lz4", lz4),
            ("ZF", |d| zf(d, b"")),
            ("ZF, one byte wider", |d| zf(d, b" ")),
        ]
    }

    fn inflated(bytes: &[u8]) -> Vec<u8> {
        let which = compressor(bytes).expect("a magic");
        let mut out = Vec::new();
        let stopped = inflate(which, bytes, &mut out, usize::MAX, &mut |_| false);
        assert_eq!(stopped.expect("inflates"), Stopped::End);
        out
    }

    #[test]
    fn every_compressor_is_told_by_its_magic_and_inflated() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for (name, compress) in every_compressor() {
            let file = compress(&data);
            assert_eq!(inflated(&file), data, "{name}");
            assert_eq!(
                compressed_pickle(&compress(PICKLE), 1 << 20),
                Some(Begins::Pickle),
                "{name}"
            );
        }
        assert_eq!(compressor(b"BZh91AY"), Some(Compressor::Bz2));
        assert_eq!(compressor(b"]\0\0\x40\0"), Some(Compressor::Lzma));
        assert_eq!(compressor(b"\x80\x04"), None);
        assert_eq!(compressed_pickle(PICKLE, 1 << 20), None);
    }

    #[test]
    fn compressed_data_of_something_else_is_no_pickle() {
        for (name, compress) in every_compressor() {
            let text = compress(b"hello, world: no pickle begins with h");
            assert_eq!(
                compressed_pickle(&text, 1 << 20),
                Some(Begins::NotPickle),
                "{name}"
            );
            // An empty stream: pickle.load raises EOFError, having run nothing.
            assert_eq!(
                compressed_pickle(&compress(b""), 1 << 20),
                Some(Begins::NotPickle),
                "{name}"
            );
        }
        // Files that begin with a magic but hold no stream of that compressor.
        for text in [
            &b"xml version and other text"[..],
            b"BZ is no bzip2 header",
            b"ZF then no length",
            b"]\0 and not an lzma header",
        ] {
            assert_eq!(
                compressed_pickle(text, 1 << 20),
                Some(Begins::NotPickle),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    /// A first opcode longer than any window: BINUNICODE of 600 bytes, popped, then the
    /// pickle; and a 100 KiB one, past the first look.
    #[test]
    fn a_long_first_operand_is_inflated_through() {
        for len in [600u32, 100 << 10] {
            let mut stream = vec![b'X'];
            stream.extend(len.to_le_bytes());
            stream.extend(std::iter::repeat_n(b'a', len as usize));
            stream.push(b'0');
            stream.extend(PICKLE);
            for (name, compress) in every_compressor() {
                let file = compress(&stream);
                assert_eq!(
                    compressed_pickle(&file, 1 << 20),
                    Some(Begins::Pickle),
                    "{name} {len}"
                );
                // Cut inside the operand, the stream is one CPython refuses unrun.
                let cut = compress(&stream[..stream.len() / 2]);
                assert_eq!(
                    compressed_pickle(&cut, 1 << 20),
                    Some(Begins::NotPickle),
                    "{name} {len}"
                );
                // A bound inside the operand decides nothing.
                assert_eq!(
                    compressed_pickle(&file, 300),
                    Some(Begins::NeedMore),
                    "{name} {len}"
                );
            }
        }
    }

    /// A file cut inside its compressed data, where the first opcode is not whole yet: the
    /// decoder fails as CPython's does, before anything could run.
    #[test]
    fn a_file_cut_inside_the_first_opcode_is_no_pickle() {
        let mut stream = vec![b'X'];
        stream.extend((200u32 << 10).to_le_bytes());
        // Incompressible, so that half the file is less than the operand.
        let mut x = 1u32;
        stream.extend((0..200u32 << 10).map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 16) as u8 & 0x7f
        }));
        stream.push(b'0');
        stream.extend(PICKLE);
        for (name, compress) in every_compressor() {
            let file = compress(&stream);
            let cut = file.get(..file.len() / 2).expect("half");
            assert_eq!(
                compressed_pickle(cut, 1 << 20),
                Some(Begins::NotPickle),
                "{name}"
            );
            let which = compressor(cut).expect("magic");
            let mut out = Vec::new();
            let e = inflate(which, cut, &mut out, usize::MAX, &mut |_| false);
            assert!(out.len() < stream.len(), "{name}");
            if let Err(e) = e {
                assert!(fails_as_cpython(&e), "{name}: {e:?}");
            }
        }
    }

    /// A decoder's own limit decides nothing: the caller fails closed.
    #[test]
    fn a_limit_of_the_decoders_here_is_undecided() {
        let dictionary = io::Error::from(lz4_flex::frame::Error::DictionaryNotSupported);
        assert!(!fails_as_cpython(&dictionary));
        assert!(fails_as_cpython(&io::Error::from(
            lz4_flex::frame::Error::WrongMagicNumber
        )));
        for kind in [io::ErrorKind::Unsupported, io::ErrorKind::OutOfMemory] {
            assert!(!fails_as_cpython(&io::Error::new(kind, "limit")), "{kind}");
        }
        // An xz stream whose header names a reserved check (0x0f) this decoder does not know:
        // it stops before any output.
        let mut file = xz(PICKLE);
        if let Some(flags) = file.get_mut(7) {
            *flags = 0x0f;
        }
        let crc = crc32(file.get(6..8).expect("flags"));
        if let Some(field) = file.get_mut(8..12) {
            field.copy_from_slice(&crc.to_le_bytes());
        }
        assert_eq!(compressed_pickle(&file, 1 << 20), Some(Begins::NeedMore));
    }

    /// CRC-32 (IEEE), for the xz stream header above.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    /// A gzip member whose header carries a 1000-byte FEXTRA field (and a name and comment).
    #[test]
    fn a_gzip_header_of_any_length_is_read_through() {
        let mut member = b"\x1f\x8b\x08\x1c\0\0\0\0\0\xff".to_vec();
        member.extend(1000u16.to_le_bytes());
        member.extend(b"TP");
        member.extend(996u16.to_le_bytes());
        member.extend([0u8; 996]);
        member.extend(b"model.joblib\0a comment\0");
        let body = gzip(PICKLE);
        // Past the plain 10-byte header: the deflate data and the trailer.
        member.extend(body.get(10..).expect("body"));
        assert_eq!(compressed_pickle(&member, 1 << 20), Some(Begins::Pickle));
        assert_eq!(inflated(&member), PICKLE);
    }

    /// A stream split across streams, members or frames is read on, as joblib's decoders read
    /// it (gzip members past the first: read though joblib spins there).
    #[test]
    fn a_first_opcode_split_across_streams_is_joined() {
        let (head, tail) = PICKLE.split_at(1);
        for (name, compress) in [
            ("gzip", gzip as Compress),
            ("bz2", bz2),
            ("xz", xz),
            ("lzma", lzma),
            ("lz4", lz4),
        ] {
            let mut file = compress(head);
            file.extend(compress(tail));
            assert_eq!(inflated(&file), PICKLE, "{name}");
            assert_eq!(
                compressed_pickle(&file, 1 << 20),
                Some(Begins::Pickle),
                "{name}"
            );
        }
        // LZMAFile tells each stream by its first byte: lzma-alone after xz, and back.
        let mut file = xz(head);
        file.extend(lzma(&tail[..3]));
        file.extend(xz(&tail[3..]));
        assert_eq!(inflated(&file), PICKLE);
        // Trailing bytes that begin no stream are ignored.
        let mut file = lzma(PICKLE);
        file.extend(b"\0\0\0\0");
        assert_eq!(inflated(&file), PICKLE);
        let mut file = xz(PICKLE);
        file.extend(b"trailing text");
        assert_eq!(inflated(&file), PICKLE);
        // An lz4 skippable frame between two frames.
        let mut file = lz4(head);
        file.extend(0x184D_2A50u32.to_le_bytes());
        file.extend(5u32.to_le_bytes());
        file.extend(b"skip!");
        file.extend(lz4(tail));
        assert_eq!(inflated(&file), PICKLE);
    }

    /// Small files that inflate far: a sniff stops at its bound, a read at the budget.
    #[test]
    fn a_bomb_stops_at_the_bound() {
        let zeros = vec![0u8; 4 << 20];
        for (name, compress) in [("bz2", bz2 as Compress), ("xz", xz), ("lzma", lzma)] {
            let bomb = compress(&zeros);
            assert!(bomb.len() < 16 << 10, "{name}: {}", bomb.len());
            let which = compressor(&bomb).expect("magic");
            let mut out = Vec::new();
            let stopped = inflate(which, &bomb, &mut out, 1 << 20, &mut |_| false);
            assert_eq!(stopped.expect("inflates"), Stopped::Full, "{name}");
            assert_eq!(out.len(), 1 << 20, "{name}");
            // Zeros: an unknown opcode, no pickle, decided from the first look.
            assert_eq!(
                compressed_pickle(&bomb, 1 << 20),
                Some(Begins::NotPickle),
                "{name}"
            );
        }
    }

    #[test]
    fn a_zf_length_is_read_as_int_reads_it() {
        let header = |field: &str| format!("ZF{field:<19}").into_bytes();
        assert_eq!(zf_length(&header("0xf4")), Some(0xf4));
        assert_eq!(zf_length(&header("  0XF_4 ")), Some(0xf4));
        assert_eq!(zf_length(&header("0x_f4")), Some(0xf4));
        assert_eq!(zf_length(&header("f4")), Some(0xf4));
        assert_eq!(zf_length(&header("0x10000000000000000")), None);
        for bad in ["", "0x", "_f4", "f4_", "f__4", "-0x4", "0xg", "0x4 4"] {
            assert_eq!(zf_length(&header(bad)), None, "{bad:?}");
        }
        assert_eq!(zf_length(b"ZF0x4"), None);
    }
}
