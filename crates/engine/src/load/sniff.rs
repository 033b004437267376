//! What a file is, from its whole content, by the rules the real loaders apply: the first
//! row of the format table (`table::FORMATS`) whose loader accepts the bytes. No fixed window:
//! a pickle is one when CPython's unpickler would run the whole file (walked until it stops or
//! fails, however long its first operand); a compressed joblib file is one when its stream,
//! inflated as far as that takes, is. Unknown content is content no loader accepts.

use super::table::{file_rules, Accepts, FileRule, Row};
use crate::Format;

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
    file_rules()
        .find(|(_, rule)| (rule.accepts)(bytes))
        .map_or(Sniffed::Unknown, |(_, rule)| rule.sniffed)
}

/// A Git LFS pointer: no loader's, but a file that stands for one, refused saying so.
pub(crate) const LFS_POINTER: Row = Row {
    what: "a Git LFS pointer",
    loader: "git lfs",
    extensions: &[],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::LfsPointer,
        accepts: |bytes| LFS_POINTER_VERSIONS.iter().any(|v| bytes.starts_with(v)),
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
