//! What a file is, from its whole content, by the rules the real loaders apply: the first
//! row of the format table (`table::FORMATS`) whose loader accepts the bytes. No fixed window:
//! a pickle is one when CPython's unpickler would run the whole file (walked until it stops or
//! fails, however long its first operand); a compressed joblib file is one when its stream,
//! inflated as far as that takes, is. Unknown content is content no loader accepts.

use super::table::{file_rules, Accepts, FileRule, Row};
use crate::error::Result;
use crate::files::HEAD;
use crate::{Format, HostBackend, HostBuffer};

/// What a file's bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    /// A file of this format, as its loader's rule accepts it.
    Format(Format),
    /// A zip archive: `torch.save` since 1.6, `torch.jit.save`, `torch.export.save` (`.pt2`)
    /// or `np.savez`, told apart by their records once the archive is open.
    Zip,
    /// A tar archive, as `torch.save` wrote before torch 0.4.
    Tar,
    /// A safetensors header that is also a pickle: `safe_open` reads the one, `torch.load`
    /// (which unpickles whatever is neither zip nor tar) runs the other. Its reader settles it
    /// by the file's name, or refuses it.
    Polyglot,
    /// A JSON document: a sharded checkpoint's index.
    JsonIndex,
    /// A Git LFS pointer: text standing for a file git has not fetched.
    LfsPointer,
    /// Bytes no loader accepts.
    Unknown,
}

/// Classifies a file from its whole content `bytes` (a prefix only where the rest is
/// unknown: a cut stream is judged as cut).
pub fn sniff(bytes: &[u8]) -> Sniffed {
    sniff_prefix(Prefix::whole(bytes)).unwrap_or(Sniffed::Unknown)
}

/// What a file is from what is read of it so far; `None` when only more of it decides: a rule
/// ahead of the first that accepts could not tell from `prefix`.
pub(crate) fn sniff_prefix(prefix: Prefix<'_>) -> Option<Sniffed> {
    for (_, rule) in file_rules() {
        match (rule.accepts)(prefix) {
            Some(true) => return Some(rule.sniffed),
            Some(false) => {}
            None if prefix.whole => {}
            None => return None,
        }
    }
    Some(Sniffed::Unknown)
}

/// What `decide` says of `buffer`, given as little of its start as decides it: a local file
/// whole at once; a remote object its head, then four times as much, until decided or whole.
pub(crate) fn decide<T>(
    buffer: &HostBuffer,
    decide: impl Fn(Prefix<'_>) -> Option<T>,
) -> Result<T> {
    let len = buffer.len();
    let mut read = match buffer.backend() {
        HostBackend::Remote => HEAD.min(len),
        _ => len,
    };
    loop {
        let prefix = Prefix {
            bytes: buffer.range(0..read)?,
            whole: read >= len,
        };
        if let Some(decided) = decide(prefix) {
            return Ok(decided);
        }
        if prefix.whole {
            // Whole, every rule decides; one that does not is taken to refuse.
            return Err(crate::Error::Remote {
                path: buffer.source().to_owned(),
                detail: "no loader's rule decided on the whole object".to_owned(),
            });
        }
        read = read.saturating_mul(4).min(len);
    }
}

/// The first bytes of a file, or all of it: what a loader's rule is given to decide on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prefix<'a> {
    /// The bytes read, from the file's start.
    pub bytes: &'a [u8],
    /// Whether they are the whole file.
    pub whole: bool,
}

impl<'a> Prefix<'a> {
    /// A whole file.
    pub(crate) fn whole(bytes: &'a [u8]) -> Self {
        Prefix { bytes, whole: true }
    }

    /// `rule` of the bytes once at least `n` are read (or the file is whole): a rule that
    /// looks at no more than its first `n` bytes.
    pub(crate) fn given(self, n: usize, rule: impl FnOnce(&'a [u8]) -> bool) -> Option<bool> {
        (self.whole || self.bytes.len() >= n).then(|| rule(self.bytes))
    }

    /// Whether the file starts with `magic`.
    pub(crate) fn starts_with(self, magic: &[u8]) -> Option<bool> {
        self.given(magic.len(), |bytes| bytes.starts_with(magic))
    }

    /// The first byte from `from` on that is not ASCII whitespace: `Some(None)` when there is
    /// none in the whole file, `None` when only more of it can tell.
    pub(crate) fn first_non_space(self, from: usize) -> Option<Option<u8>> {
        let rest = self.bytes.get(from..).unwrap_or_default();
        match rest.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(&b) => Some(Some(b)),
            None => self.whole.then_some(None),
        }
    }
}

/// Both rules, decided as soon as either refuses.
pub(crate) fn both(a: Option<bool>, b: impl FnOnce() -> Option<bool>) -> Option<bool> {
    match a {
        Some(false) => Some(false),
        a => match (a, b()) {
            (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
    }
}

/// A Git LFS pointer: no loader's, but a file that stands for one, refused saying so.
pub(crate) const LFS_POINTER: Row = Row {
    what: "a Git LFS pointer",
    loader: "git lfs",
    extensions: &[],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::LfsPointer,
        accepts: |prefix| {
            prefix.given(LFS_POINTER_VERSIONS[0].len(), |bytes| {
                LFS_POINTER_VERSIONS.iter().any(|v| bytes.starts_with(v))
            })
        },
        read: None,
    }),
};

/// The first line of a Git LFS pointer (spec v1; `hawser` is its pre-release name).
const LFS_POINTER_VERSIONS: [&[u8]; 2] = [
    b"version https://git-lfs.github.com/spec/",
    b"version https://hawser.github.com/spec/",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_content() {
        let mut st = 16u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{\"a\":1}         ");
        assert_eq!(sniff(&st), Sniffed::Format(Format::Safetensors));
        // 0x7b is '{': a safetensors length prefix may begin like JSON.
        let mut st = 123u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{}");
        assert_eq!(sniff(&st), Sniffed::Format(Format::Safetensors));
        assert_eq!(sniff(b"PK\x03\x04rest"), Sniffed::Zip);
        assert_eq!(
            sniff(b"\x93NUMPY\x01\x00v\x00{"),
            Sniffed::Format(Format::Numpy)
        );
        assert_eq!(
            sniff(b"GGUF\x03\x00\x00\x00"),
            Sniffed::Format(Format::Gguf)
        );
        let legacy = [
            0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
            0x2e,
        ];
        assert_eq!(sniff(&legacy), Sniffed::Format(Format::PytorchLegacy));
        // pickle_protocol=4 and 5 frame it; 0 and 1 write it as text.
        let mut framed = vec![0x80, 0x04, 0x95, 0x0d, 0, 0, 0, 0, 0, 0, 0];
        framed.extend_from_slice(&legacy[2..]);
        assert_eq!(sniff(&framed), Sniffed::Format(Format::PytorchLegacy));
        assert_eq!(
            sniff(b"L119547037146038801333356L\n.I1001\n."),
            Sniffed::Format(Format::PytorchLegacy)
        );
        assert_eq!(sniff(b"  {\n  \"metadata\": {}"), Sniffed::JsonIndex);
        assert_eq!(sniff(b"\xef\xbb\xbf{\"weight_map\""), Sniffed::JsonIndex);
        assert_eq!(sniff(b""), Sniffed::Unknown);
        assert_eq!(
            sniff(b"\x00\x00\x00\x00\x00\x00\x00\x00{"),
            Sniffed::Unknown
        );
        // A real GIF header; `GIF89a....` itself is a whole pickle (BINFLOAT, STOP).
        assert_eq!(
            sniff(b"GIF89a\x01\x00\x01\x00\x80\x00\x00"),
            Sniffed::Unknown
        );
        assert_eq!(
            sniff(b"version https://git-lfs.github.com/spec/v1\noid sha256:"),
            Sniffed::LfsPointer
        );
        assert_eq!(
            sniff(b"\x80\x04\x95\x10\0\0\0\0\0\0\0}\x94."),
            Sniffed::Format(Format::Pickle)
        );
        assert_eq!(
            sniff(b"(dp0\nVa\np1\nI5\ns."),
            Sniffed::Format(Format::Pickle)
        );
    }

    #[test]
    fn a_first_operand_longer_than_any_window_is_read_through() {
        let call = b"cos\nsystem\n(S'true'\ntR.";
        // BINUNICODE of 600 bytes, then POP and the call.
        let mut x = vec![b'X'];
        x.extend(600u32.to_le_bytes());
        x.extend([b'a'; 600]);
        x.push(b'0');
        x.extend(call);
        assert_eq!(sniff(&x), Sniffed::Format(Format::Pickle));
        // A 700-byte protocol-0 UNICODE line.
        let mut v = vec![b'V'];
        v.extend([b'a'; 700]);
        v.extend(b"\n0");
        v.extend(call);
        assert_eq!(sniff(&v), Sniffed::Format(Format::Pickle));
        // Cut inside the operand, the same stream is one CPython refuses unrun.
        assert_eq!(sniff(&x[..512]), Sniffed::Unknown);
    }
}
