//! Content sniffing: which reader a file needs, from its first bytes alone.

/// How many leading bytes [`sniff`] looks at: a tar header block.
pub const SNIFF_LEN: usize = 512;

/// What the first bytes of a file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniffed {
    /// An 8-byte little-endian header length followed by a JSON object.
    Safetensors,
    /// NumPy's magic string `\x93NUMPY`: a `.npy` array (`np.save`).
    Numpy,
    /// The magic `GGUF`: llama.cpp's model file.
    Gguf,
    /// A zip archive: `torch.save` since 1.6, `torch.jit.save` or `torch.export.save` (`.pt2`),
    /// told apart by their records once the archive is open (`zip::kind`).
    Zip,
    /// A legacy `torch.save` stream: a pickle of PyTorch's magic number first.
    LegacyPickle,
    /// A tar archive, as `torch.save` wrote before torch 0.4.
    Tar,
    /// A JSON document: a sharded checkpoint's index.
    JsonIndex,
    /// A Git LFS pointer: text standing for a file git has not fetched.
    LfsPointer,
    /// A plain pickle stream of any protocol (`pickle.dump`, `.pkl`), joblib's uncompressed
    /// files among them.
    Pickle,
    /// A zlib or gzip stream that inflates to a pickle: `joblib.dump(..., compress=...)`.
    Joblib,
    /// A safetensors header that may also begin a pickle: `safe_open` reads the one,
    /// `torch.load` (which unpickles whatever is neither zip nor tar) runs the other. Its
    /// reader settles it from the whole file and its name.
    Polyglot,
    /// None of the above.
    Unknown,
}

/// The pickled magic number `0x1950a86a20f9469cfc6c` as `LONG1` (protocol 2 and later).
const LEGACY_MAGIC: [u8; 12] = [
    0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
];

/// The same number as protocols 0 and 1 write it: a text `LONG`.
const LEGACY_MAGIC_TEXT: &[u8] = b"L119547037146038801333356L\n";

/// Whether the first pickle's first value is PyTorch's legacy magic number, in whichever
/// protocol `torch.save(..., pickle_protocol=n)` wrote it: text for 0 and 1, `LONG1` after
/// `PROTO` from 2 on, inside a `FRAME` from 4 on (torch.load reads the first pickle whatever
/// its protocol and compares the value).
fn begins_legacy(prefix: &[u8]) -> bool {
    let mut rest = prefix;
    if let [0x80, _, tail @ ..] = rest {
        rest = tail;
        if let [0x95, tail @ ..] = rest {
            rest = tail.get(8..).unwrap_or_default();
        }
        return rest.starts_with(&LEGACY_MAGIC);
    }
    rest.starts_with(LEGACY_MAGIC_TEXT)
}

/// Classifies a file from its first bytes (up to `SNIFF_LEN`).
pub fn sniff(prefix: &[u8]) -> Sniffed {
    // No tar header, zip, pickle or JSON begins with 0x93 'NUMPY' (0x93 is a pickle's
    // STACK_GLOBAL, which fails on an empty stack).
    if prefix.starts_with(super::numpy::MAGIC) {
        return Sniffed::Numpy;
    }
    // 'G' is a pickle's BINFLOAT, never the start of a checkpoint torch.load reads: no
    // PyTorch pickle begins with a float; no zip, tar or safetensors header begins so.
    if prefix.starts_with(super::gguf::MAGIC) {
        return Sniffed::Gguf;
    }
    // torch.load reads a zip when the file starts with a local header, then tries tarfile
    // on anything else, and only then the legacy stream.
    if !prefix.starts_with(b"PK\x03\x04") && super::torch::tar::opens(prefix) {
        return Sniffed::Tar;
    }
    if prefix.starts_with(b"PK\x03\x04") || prefix.starts_with(b"PK\x05\x06") {
        return Sniffed::Zip;
    }
    if begins_legacy(prefix) {
        return Sniffed::LegacyPickle;
    }
    if looks_like_safetensors(prefix) {
        if super::pickle_start::may_begin_pickle(prefix) {
            return Sniffed::Polyglot;
        }
        return Sniffed::Safetensors;
    }
    let text = prefix.strip_prefix(b"\xef\xbb\xbf").unwrap_or(prefix);
    if text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        return Sniffed::JsonIndex;
    }
    if LFS_POINTER_VERSIONS.iter().any(|v| prefix.starts_with(v)) {
        return Sniffed::LfsPointer;
    }
    if super::pickle_start::begins_pickle(prefix) {
        return Sniffed::Pickle;
    }
    if super::joblib::sniff_compressed(prefix) {
        return Sniffed::Joblib;
    }
    Sniffed::Unknown
}

/// The first line of a Git LFS pointer (spec v1; `hawser` is its pre-release name).
const LFS_POINTER_VERSIONS: [&[u8]; 2] = [
    b"version https://git-lfs.github.com/spec/",
    b"version https://hawser.github.com/spec/",
];

/// A plausible header length (below 2^40, so JSON text in those bytes never qualifies)
/// followed by JSON: `{`, or whitespace the reader will then reject with a precise message.
fn looks_like_safetensors(prefix: &[u8]) -> bool {
    let Some(len_bytes) = prefix.get(..8) else {
        return false;
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(len_bytes);
    let n = u64::from_le_bytes(le);
    let first = prefix
        .get(8..)
        .unwrap_or_default()
        .iter()
        .find(|b| !b.is_ascii_whitespace());
    n > 0 && n < (1 << 40) && first == Some(&b'{')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_content() {
        let mut st = 16u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{\"a\":1}         ");
        assert_eq!(sniff(&st), Sniffed::Safetensors);
        // 0x7b is '{': a safetensors length prefix may begin like JSON.
        let mut st = 123u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{}");
        assert_eq!(sniff(&st), Sniffed::Safetensors);
        assert_eq!(sniff(b"PK\x03\x04rest"), Sniffed::Zip);
        assert_eq!(sniff(b"\x93NUMPY\x01\x00v\x00{"), Sniffed::Numpy);
        assert_eq!(sniff(b"GGUF\x03\x00\x00\x00"), Sniffed::Gguf);
        let legacy = [
            0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
            0x2e,
        ];
        assert_eq!(sniff(&legacy), Sniffed::LegacyPickle);
        // pickle_protocol=4 and 5 frame it; 0 and 1 write it as text.
        let mut framed = vec![0x80, 0x04, 0x95, 0x0d, 0, 0, 0, 0, 0, 0, 0];
        framed.extend_from_slice(&legacy[2..]);
        assert_eq!(sniff(&framed), Sniffed::LegacyPickle);
        assert_eq!(
            sniff(b"L119547037146038801333356L\n.I1001\n."),
            Sniffed::LegacyPickle
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
            Sniffed::Pickle
        );
        assert_eq!(sniff(b"(dp0\nVa\np1\nI5\ns."), Sniffed::Pickle);
    }
}
