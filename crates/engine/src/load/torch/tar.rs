//! The old `torch.save` tar format (torch < 0.4), which `torch.load` still reads with
//! `weights_only=False`: `_legacy_load` opens any file that is not a zip with
//! `tarfile.open(mode="r:")` and, when that succeeds, reads the members `storages` (a count
//! pickle, then per storage an argument pickle and raw bytes, then a views pickle), `tensors`
//! (a count pickle, then per tensor an argument pickle and a raw shape record) and `pickle`.
//! Each of those pickles runs. A `tarfile.TarError` after opening sends torch to the legacy
//! stream at byte 0 instead, and a file object without a descriptor skips the tar attempt.
//!
//! tensorplay does not rebuild this format's tensors: every such file is refused (TP502), and
//! the refusal names the unsafe globals of every pickle either reading would run. Headers are
//! read here rather than by a tar library so that what counts as a header is exactly what
//! Python's `tarfile` accepts: its checksum rule and its lenient number fields.

use super::legacy::Pickles;
use crate::error::{Error, Result};
use crate::load::table::{Accepts, FileReader, FileRule, Row};
use crate::load::Sink;
use crate::load::Sniffed;
use crate::pickle::allowlist::Known;
use crate::pickle::{unpickle, Budget, Loader, Node, Unpickled, UnsafeGlobal};
use crate::{Format, HostBuffer};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

const BLOCK: u64 = 512;

/// The members `legacy_load` reads, in its order, and `sys_info`, which every tar checkpoint
/// has and torch 2.9.1 ignores; audited all the same.
const MEMBERS: [&str; 4] = ["storages", "tensors", "pickle", "sys_info"];

/// What the refusal calls the format when nothing else is wrong.
const FORMAT: &str = "old PyTorch tar (torch < 0.4)";

/// Whether `tarfile.open(mode="r:")` opens a file starting with `prefix`: the first block is
/// a header whose checksum and number fields `tarfile` accepts, or all zeros (an empty
/// archive). Extension headers (pax, GNU long names) count as opened even where `tarfile`
/// would fail on what follows: refusing such a file is safe, reading it as a stream is not.
pub(crate) fn opens(prefix: &[u8]) -> bool {
    prefix
        .get(..BLOCK as usize)
        .is_some_and(|block| block.iter().all(|&b| b == 0) || Header::parse(block).is_some())
}

/// `torch.save` before torch 0.4: `torch.load` tries `tarfile` on whatever is not a zip, before
/// the legacy stream. The reader reads the legacy stream the same bytes may be too.
pub(crate) const ROW: Row = Row {
    what: "an old PyTorch tar archive",
    loader: "torch.load",
    extensions: &["tar"],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Tar,
        accepts: |prefix| {
            prefix.given(BLOCK as usize, |bytes| {
                !bytes.starts_with(b"PK\x03\x04") && opens(bytes)
            })
        },
        read: Some(FileReader {
            read: read_into,
            index: Format::PytorchIndex,
            reads_pickle: true,
        }),
    }),
};

/// Audits every pickle of a tar checkpoint, and the legacy stream the same bytes may be,
/// then refuses the file.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    let budget = sink.meter().pickle_budget();
    let mut globals = Pickles::read(buffer, &budget).unsafe_globals();
    let (entries, mut problem) = entries(buffer);
    for entry in &entries {
        let Some(&name) = MEMBERS.iter().find(|m| normalizes_to(&entry.name, m)) else {
            continue;
        };
        let mut member = MemberPickles {
            buffer,
            budget: &budget,
            name,
            data: entry.data.clone(),
            pos: entry.data.start,
            count: 0,
            globals: &mut globals,
        };
        let audited = if entry.regular {
            member.audit()
        } else {
            Err(archive(
                buffer.source(),
                &format!("tar member '{name}' at byte {}", entry.header_at),
                "is not a regular file: torch would extract it as a link or special file, which tensorplay does not follow",
            ))
        };
        if let Err(e) = audited {
            problem.get_or_insert(e);
        }
    }
    for name in &MEMBERS[..3] {
        if problem.is_none() && !entries.iter().any(|e| normalizes_to(&e.name, name)) {
            problem = Some(archive(
                buffer.source(),
                "tar archive",
                &format!("has no member '{name}', which torch.load reads"),
            ));
        }
    }
    globals.sort_by_key(|g| g.position);
    let reason = problem.unwrap_or_else(|| Error::UnsupportedFormat {
        path: buffer.source().to_owned(),
        format: FORMAT,
    });
    Err(reason.with_unsafe_globals(globals))
}

fn archive(path: &Path, part: &str, detail: &str) -> Error {
    Error::Malformed {
        path: path.to_owned(),
        part: part.to_owned(),
        detail: detail.to_owned(),
    }
}

/// One header block as `tarfile`'s `TarInfo.frombuf` reads it.
struct Header {
    name: Vec<u8>,
    kind: u8,
    size: i128,
}

impl Header {
    /// `None` where `frombuf` raises: a bad checksum or a number field that does not parse.
    fn parse(block: &[u8]) -> Option<Header> {
        if block.len() != BLOCK as usize || !checksum_matches(block) {
            return None;
        }
        // mode, uid, gid, size, mtime, devmajor, devminor
        for field in [
            100..108,
            108..116,
            116..124,
            124..136,
            136..148,
            329..337,
            337..345,
        ] {
            number(block.get(field)?)?;
        }
        let size = number(block.get(124..136)?)?;
        let mut kind = *block.get(156)?;
        let mut name = until_nul(block.get(..100)?).to_vec();
        // Old V7 archives mark a directory by a trailing slash on a regular entry.
        if kind == 0 && name.ends_with(b"/") {
            kind = b'5';
        }
        if kind == b'5' {
            while name.ends_with(b"/") {
                name.pop();
            }
        }
        let prefix = until_nul(block.get(345..500)?);
        if !prefix.is_empty() && !matches!(kind, b'L' | b'K' | b'S') {
            name = [prefix, b"/", &name].concat();
        }
        Some(Header { name, kind, size })
    }

    /// Whether `tarfile` skips `size` bytes of data after this header and can extract it as
    /// a file: the regular types and every type it does not know.
    fn regular(&self) -> bool {
        !matches!(
            self.kind,
            b'1'..=b'6' | b'L' | b'K' | b'S' | b'x' | b'g' | b'X'
        )
    }
}

/// `tarfile.calc_chksums`: the stored checksum may be the unsigned or the signed byte sum,
/// counting the checksum field as eight spaces.
fn checksum_matches(block: &[u8]) -> bool {
    let Some(stored) = block.get(148..156).and_then(number) else {
        return false;
    };
    let (mut unsigned, mut signed) = (256i128, 256i128);
    for (i, &b) in block.iter().enumerate() {
        if !(148..156).contains(&i) {
            unsigned += i128::from(b);
            signed += i128::from(b as i8);
        }
    }
    stored == unsigned || stored == signed
}

fn until_nul(field: &[u8]) -> &[u8] {
    field.split(|&b| b == 0).next().unwrap_or_default()
}

/// A number field as `tarfile.nti` reads it: big-endian base 256 after a 0x80 or 0xff byte
/// (0xff: negative), otherwise the ASCII text before the first NUL as Python's
/// `int(text.strip() or "0", 8)` parses it.
fn number(field: &[u8]) -> Option<i128> {
    match field.first() {
        Some(&lead @ (0x80 | 0xff)) => {
            let digits = field.get(1..)?;
            let mut n: i128 = 0;
            for &b in digits {
                n = n.checked_mul(256)?.checked_add(i128::from(b))?;
            }
            if lead == 0xff {
                let bits = u32::try_from(digits.len()).ok()?.checked_mul(8)?;
                n = n.checked_sub(1i128.checked_shl(bits)?)?;
            }
            Some(n)
        }
        _ => python_octal(until_nul(field)),
    }
}

/// Python's `int(text.strip() or "0", 8)`: surrounding whitespace, a sign, a `0o` prefix,
/// and single underscores between digits (or right after the prefix) are all accepted.
fn python_octal(text: &[u8]) -> Option<i128> {
    if !text.is_ascii() {
        return None;
    }
    // str.strip(): ASCII whitespace and the four separator controls.
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0x1c..=0x1f);
    let Some(start) = text.iter().position(|b| !space(b)) else {
        return Some(0);
    };
    let end = text.iter().rposition(|b| !space(b))?;
    let s = text.get(start..=end)?;
    let (negative, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let (prefixed, s) = match s {
        [b'0', b'o' | b'O', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    let mut n: i128 = 0;
    let (mut digit_seen, mut underscore_last) = (false, false);
    for (i, &b) in s.iter().enumerate() {
        match b {
            b'0'..=b'7' => {
                n = n.checked_mul(8)?.checked_add(i128::from(b - b'0'))?;
                digit_seen = true;
                underscore_last = false;
            }
            b'_' if !underscore_last && (digit_seen || (prefixed && i == 0)) => {
                underscore_last = true;
            }
            _ => return None,
        }
    }
    (digit_seen && !underscore_last).then_some(if negative { -n } else { n })
}

/// `os.path.normpath(name) == wanted`, the way `tarfile.getmember` finds a member.
fn normalizes_to(name: &[u8], wanted: &str) -> bool {
    if name.starts_with(b"/") {
        return false;
    }
    let mut parts: Vec<&[u8]> = Vec::new();
    for part in name.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." if parts.last().is_some_and(|&p| p != b"..") => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts == [wanted.as_bytes()]
}

/// One archive member as `tarfile` lists it.
struct Entry {
    name: Vec<u8>,
    regular: bool,
    header_at: u64,
    /// Its data: empty for members that are not regular files.
    data: Range<u64>,
}

/// The members as `tarfile` lists them (it lists them all before extracting any), and what
/// stopped the listing where tensorplay cannot follow it or `tarfile` raises.
fn entries(buffer: &HostBuffer) -> (Vec<Entry>, Option<Error>) {
    let bytes = buffer.bytes();
    let len = buffer.len();
    let fail = |at: u64, detail: &str| {
        archive(buffer.source(), &format!("tar header at byte {at}"), detail)
    };
    let mut out = Vec::new();
    let mut at = 0u64;
    loop {
        let block = usize::try_from(at)
            .ok()
            .and_then(|p| bytes.get(p..p.checked_add(BLOCK as usize)?));
        // After the first header, a short, zero or invalid block ends the archive for tarfile.
        let Some(header) = block.and_then(Header::parse) else {
            return (out, None);
        };
        let extension = match header.kind {
            b'x' | b'X' | b'g' => Some("a pax extended header"),
            b'L' | b'K' => Some("a GNU long-name header"),
            b'S' => Some("a GNU sparse member"),
            _ => None,
        };
        if let Some(what) = extension {
            return (
                out,
                Some(fail(at, &format!("{what}, which tensorplay does not read"))),
            );
        }
        let Ok(size) = u64::try_from(header.size) else {
            return (out, Some(fail(at, "negative member size")));
        };
        let regular = header.regular();
        let size = if regular { size } else { 0 };
        // The header block was just read, so it ends inside the file.
        let start = at + BLOCK;
        let next = size
            .checked_next_multiple_of(BLOCK)
            .and_then(|padded| start.checked_add(padded))
            .filter(|&next| next <= len);
        let Some(next) = next else {
            // tarfile raises ReadError here; torch then reads the file as a legacy stream.
            return (
                out,
                Some(fail(
                    at,
                    &format!("member data ({size} bytes) runs past the end of the file"),
                )),
            );
        };
        out.push(Entry {
            name: header.name,
            regular,
            header_at: at,
            data: start..start + size,
        });
        at = next;
    }
}

/// The pickles of one member, read in the order `legacy_load` reads them.
struct MemberPickles<'a> {
    buffer: &'a HostBuffer,
    budget: &'a Budget,
    name: &'static str,
    data: Range<u64>,
    pos: u64,
    /// Pickles read so far.
    count: u32,
    globals: &'a mut Vec<UnsafeGlobal>,
}

impl MemberPickles<'_> {
    fn audit(&mut self) -> Result<()> {
        match self.name {
            "storages" => {
                self.records("num_storages", "storage args", Self::storage)?;
                self.pickle(Some("storage_views")).map(drop)
            }
            "tensors" => self.records("num_tensors", "tensor args", Self::tensor),
            _ => self.pickle(None).map(drop),
        }
    }

    /// A count pickle, then that many argument pickles each followed by raw bytes.
    fn records(
        &mut self,
        count_role: &str,
        args_role: &str,
        raw: fn(&mut Self, &Unpickled) -> Result<()>,
    ) -> Result<()> {
        let at = self.pos;
        let count = self.pickle(Some(count_role))?;
        let count = count
            .heap
            .int(count.root)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| self.fail(at, "the count is not a non-negative integer"))?;
        // Each record takes at least one byte, so running out of data ends the loop.
        for _ in 0..count {
            let args = self.pickle(Some(args_role))?;
            raw(self, &args)?;
        }
        Ok(())
    }

    /// A storage's raw record: an 8-byte element count, then the elements.
    fn storage(&mut self, args: &Unpickled) -> Result<()> {
        let at = self.pos;
        let element_size = args
            .heap
            .seq(args.root)
            .and_then(|items| match args.heap.get(*items.get(2)?) {
                Node::Global(g) => match g.known() {
                    Some(Known::Storage(Some(dtype))) => dtype.element_size(),
                    _ => None,
                },
                _ => None,
            })
            .ok_or_else(|| self.fail(at, "storage arguments do not name a storage class"))?;
        let count = u64::from_le_bytes(self.raw(8)?.try_into().unwrap_or_default());
        let nbytes = count
            .checked_mul(element_size)
            .ok_or_else(|| self.fail(at, "storage size overflows"))?;
        self.raw(nbytes).map(drop)
    }

    /// A tensor's raw record: a 4-byte dimension count, 4 bytes torch skips, sizes and
    /// strides (8 bytes each per dimension) and an 8-byte offset.
    fn tensor(&mut self, _args: &Unpickled) -> Result<()> {
        let at = self.pos;
        let ndim = i32::from_le_bytes(self.raw(4)?.try_into().unwrap_or_default());
        let rest = u64::try_from(ndim)
            .ok()
            .and_then(|n| n.checked_mul(16)?.checked_add(12))
            .ok_or_else(|| self.fail(at, &format!("tensor has {ndim} dimensions")))?;
        self.raw(rest).map(drop)
    }

    /// The next pickle of the member; its unsafe globals are recorded as soon as it parses.
    fn pickle(&mut self, role: Option<&str>) -> Result<Unpickled> {
        self.count += 1;
        let member = match role {
            Some(role) => format!("tar member '{}' pickle {} ({role})", self.name, self.count),
            None => format!("tar member '{}'", self.name),
        };
        let bytes = self.slice(self.pos..self.data.end);
        let mut u = unpickle(
            bytes,
            self.buffer.source(),
            &member,
            self.pos,
            Loader::Python,
            self.budget,
        )?;
        // The pickle lies inside the member's data, so this stays within it.
        self.pos += u.len;
        self.globals.append(&mut u.unsafe_globals);
        Ok(u)
    }

    /// The next `n` raw bytes of the member.
    fn raw(&mut self, n: u64) -> Result<&[u8]> {
        let at = self.pos;
        let end = at
            .checked_add(n)
            .filter(|&end| end <= self.data.end)
            .ok_or_else(|| self.fail(at, &format!("{n} bytes run past the end of the member")))?;
        self.pos = end;
        Ok(self.slice(at..end))
    }

    fn slice(&self, range: Range<u64>) -> &[u8] {
        usize::try_from(range.start)
            .ok()
            .zip(usize::try_from(range.end).ok())
            .and_then(|(start, end)| self.buffer.bytes().get(start..end))
            .unwrap_or_default()
    }

    fn fail(&self, at: u64, detail: &str) -> Error {
        archive(
            self.buffer.source(),
            &format!("tar member '{}' at byte {at}", self.name),
            detail,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header as Python's `tarfile` writes it for a 5-byte regular file `name`.
    fn header(name: &[u8]) -> Vec<u8> {
        let mut block = vec![0u8; 512];
        block[..name.len()].copy_from_slice(name);
        block[100..108].copy_from_slice(b"0000644\0");
        block[108..116].copy_from_slice(b"0000000\0");
        block[116..124].copy_from_slice(b"0000000\0");
        block[124..136].copy_from_slice(b"00000000005\0");
        block[136..148].copy_from_slice(b"00000000000\0");
        block[156] = b'0';
        block[257..265].copy_from_slice(b"ustar\x0000");
        set_checksum(&mut block, |sum| format!("{sum:06o}\0 ").into_bytes());
        block
    }

    fn set_checksum(block: &mut [u8], text: impl Fn(u32) -> Vec<u8>) {
        block[148..156].copy_from_slice(b"        ");
        let sum: u32 = block.iter().map(|&b| u32::from(b)).sum();
        let field = text(sum);
        block[148..156].fill(0);
        block[148..148 + field.len()].copy_from_slice(&field);
    }

    #[test]
    fn number_fields_parse_as_python_int_does() {
        for (text, value) in [
            (&b"0000644\0"[..], Some(0o644)),
            (b"   644  ", Some(0o644)),
            (b"\0garbage", Some(0)),
            (b"        ", Some(0)),
            (b"0o17", Some(0o17)),
            (b" -0O1_7\x1f", Some(-0o17)),
            (b"0o_7", Some(7)),
            (b"1__7", None),
            (b"_17", None),
            (b"17_", None),
            (b"8", None),
            (b"1 7", None),
            (b"+", None),
            (b"\xc3\xa9", None),
            (b"\x80\x00\x00\x01\x00", Some(256)),
            (b"\xff\xff\xff\xff\xfe", Some(-2)),
        ] {
            assert_eq!(number(text), value, "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn a_header_opens_when_tarfile_accepts_its_checksum() {
        let block = header(b"storages");
        assert!(opens(&block));
        assert!(!opens(&block[..511]), "tarfile needs a whole block");
        assert!(
            opens(&[0u8; 512]),
            "tarfile opens an all-zero block as an empty archive"
        );
        let mut bad = block.clone();
        bad[0] = b'S';
        assert!(!opens(&bad));
        // Sun and NeXT tars sum signed bytes (0xff counts -1, not 255); tarfile takes either.
        let mut signed = header(b"\xffstorages");
        set_checksum(&mut signed, |sum| {
            format!("{:06o}\0 ", sum - 256).into_bytes()
        });
        assert!(opens(&signed));
        set_checksum(&mut signed, |sum| {
            format!("{:06o}\0 ", sum - 255).into_bytes()
        });
        assert!(!opens(&signed));
        let mut unusual = header(b"pickle");
        set_checksum(&mut unusual, |sum| format!("0o{sum:o}").into_bytes());
        assert!(opens(&unusual), "Python's int() takes a 0o prefix");
        let mut mode = header(b"pickle");
        mode[100..108].copy_from_slice(b"0000648\0");
        set_checksum(&mut mode, |sum| format!("{sum:06o}\0 ").into_bytes());
        assert!(!opens(&mode), "an invalid mode field makes frombuf raise");
    }

    #[test]
    fn sniffing_tries_zip_then_tar_as_torch_load_does() {
        use crate::load::{sniff, Sniffed};
        // torch.load checks only for a local file header before trying tarfile.
        assert_eq!(sniff(&header(b"PK\x03\x04storages")), Sniffed::Zip);
        assert_eq!(sniff(&header(b"PK\x05\x06storages")), Sniffed::Tar);
        // A legacy stream's first bytes do not keep a valid header from being a tar.
        let mut legacy = vec![0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20];
        legacy.extend_from_slice(&[0x6a, 0xa8, 0x50, 0x19, 0x2e]);
        assert_eq!(sniff(&header(&legacy)), Sniffed::Tar);
        assert_eq!(
            sniff(&header(&legacy)[..511]),
            Sniffed::Format(Format::PytorchLegacy)
        );
    }

    #[test]
    fn member_names_match_as_getmember_normalizes_them() {
        for (name, matches) in [
            (&b"storages"[..], true),
            (b"./storages", true),
            (b"a/../storages", true),
            (b"storages/.", true),
            (b"/storages", false),
            (b"../storages", false),
            (b"a/storages", false),
            (b"storage", false),
        ] {
            assert_eq!(
                normalizes_to(name, "storages"),
                matches,
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
    }
}
