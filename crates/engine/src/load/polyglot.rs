//! A safetensors header that may also begin a pickle. `safe_open` reads the header;
//! `torch.load` unpickles any file that is neither zip nor tar, and `pickle.load` any file:
//! one file, two loaders, two readings. Settled here from the whole file: when CPython would
//! not run it as a pickle it is safetensors; when it would, the file's name says which
//! loader reads it (`.safetensors`, or a name the ecosystem hands to `torch.load`), and it is
//! read as that loader reads it; any other name is refused, naming the globals the pickle
//! reading found.

use super::Sniffed;
use super::{pickle_file, pickle_start, safetensors, Parts};
use crate::error::{Error, Result};
use crate::{Format, HostBuffer};
use std::path::Path;
use std::sync::Arc;

/// Extensions whose loader is `safetensors`' own.
const SAFETENSORS_NAMES: [&str; 1] = ["safetensors"];
/// Extensions the ecosystem hands to `torch.load` or `pickle.load` (transformers'
/// `pytorch_model.bin`, Lightning's `.ckpt`, `.pt`/`.pth`, `.pkl`).
const PICKLE_NAMES: [&str; 6] = ["bin", "pt", "pth", "ckpt", "pkl", "pickle"];

/// What a file [`sniff`](super::sniff) called a polyglot is, from its whole `bytes` and the
/// name's extension (ASCII case ignored): safetensors when CPython would not run it as a
/// pickle or its name is `.safetensors`, a pickle when its name is one `torch.load` is handed,
/// otherwise still a polyglot, which this reader refuses.
pub(crate) fn settle(path: &Path, bytes: &[u8]) -> Sniffed {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default();
    let named = |names: &[&str]| names.iter().any(|n| n.eq_ignore_ascii_case(ext));
    if !pickle_start::begins_pickle(bytes) || named(&SAFETENSORS_NAMES) {
        Sniffed::Safetensors
    } else if named(&PICKLE_NAMES) {
        Sniffed::Pickle
    } else {
        Sniffed::Polyglot
    }
}

pub(crate) fn read_into(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<Format> {
    match settle(buffer.source(), buffer.bytes()) {
        Sniffed::Safetensors => safetensors::read_into(buffer, parts),
        Sniffed::Pickle => pickle_file::read_into(buffer, parts),
        _ => Err(refusal(buffer, parts)),
    }
}

/// The refusal of a file no name settles, with the globals its pickle reading names.
fn refusal(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Error {
    let refused = Error::AmbiguousFormat {
        path: buffer.source().to_owned(),
        reason: "its bytes are both a safetensors file (read by safe_open) and a pickle \
                 (run by torch.load and pickle.load), and its name says neither; name it \
                 .safetensors or re-save it"
            .into(),
    };
    let globals = match pickle_file::read_into(buffer, parts) {
        Err(e) => e.unsafe_globals().to_vec(),
        Ok(_) => std::mem::take(&mut parts.unsafe_globals),
    };
    refused.with_unsafe_globals(globals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{from_buffer, sniff, Sniffed};

    /// A pickle whose UNICODE opcode (the length's low byte, `V`) swallows the rest of the
    /// length and a JSON header padded past the sniffed prefix, up to its trailing newline,
    /// then calls `os.system`.
    fn polyglot() -> Vec<u8> {
        let json = b"{\"__metadata__\":{\"a\":\"b\"}}";
        let len = 0x56 | (1000u64 << 8);
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(json);
        bytes.resize(8 + len as usize - 1, b' ');
        bytes.extend_from_slice(b"\n0cos\nsystem\n(S'true'\ntR.");
        bytes
    }

    fn read(name: &str, bytes: &[u8]) -> Result<crate::Checkpoint> {
        from_buffer(HostBuffer::from_vec(name, bytes.to_vec()))
    }

    #[test]
    fn a_safetensors_file_that_is_also_a_pickle_is_read_as_its_name_says_or_refused() {
        let bytes = polyglot();
        assert_eq!(sniff(&bytes), Sniffed::Polyglot);
        let names_global = |e: &Error| {
            e.unsafe_globals()
                .iter()
                .any(|g| g.module == "os" && g.name == "system")
        };
        for name in ["pytorch_model", "model.weights", "m.json"] {
            let error = read(name, &bytes).expect_err(name);
            assert!(
                matches!(&error, Error::RefusedWithUnsafeGlobals { source, .. }
                    if matches!(**source, Error::AmbiguousFormat { .. })),
                "{name}: {error}"
            );
            assert!(names_global(&error), "{name}: {error}");
        }
        for name in ["pytorch_model.bin", "m.PT", "last.ckpt", "x.pkl"] {
            let read = read(name, &bytes);
            let globals = match &read {
                Ok(ckpt) => ckpt.unsafe_globals.clone(),
                Err(e) => e.unsafe_globals().to_vec(),
            };
            assert!(
                globals
                    .iter()
                    .any(|g| g.module == "os" && g.name == "system"),
                "{name}: read as a pickle, naming os.system: {read:?}"
            );
        }
        // safe_open is the loader of a .safetensors name, and reads the header.
        let error = read("model.safetensors", &bytes).expect_err("trailing pickle bytes");
        assert!(!names_global(&error), "{error}");
    }

    #[test]
    fn a_safetensors_header_that_only_starts_like_a_pickle_is_safetensors() {
        // `V` first, but no newline anywhere: CPython's UNICODE runs off the end, a
        // truncated stream it refuses before running anything.
        let json = b"{\"__metadata__\":{\"a\":\"b\"}}";
        let len = 0x56 | (64u64 << 8);
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(json);
        bytes.resize(8 + len as usize, b' ');
        assert_eq!(sniff(&bytes), Sniffed::Polyglot);
        // Settled before any reader is chosen, so an index's shards agree on one format.
        assert_eq!(
            settle(Path::new("pytorch_model"), &bytes),
            Sniffed::Safetensors
        );
        let ckpt = read("pytorch_model", &bytes).expect("safetensors");
        assert_eq!(ckpt.format, Format::Safetensors);
    }
}
