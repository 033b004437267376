//! A safetensors header that may also begin a pickle. `safe_open` reads the header;
//! `torch.load` unpickles any file that is neither zip nor tar, and `pickle.load` any file:
//! one file, two loaders, two readings. Settled here from the whole file: when CPython would
//! not run it as a pickle it is safetensors; when it would, the file's name says which
//! loader reads it (`.safetensors`, or a name the ecosystem hands to `torch.load`), and it is
//! read as that loader reads it; any other name is refused. Either way the globals of the
//! pickle reading are named: a file made to be both is made to run them somewhere.

use super::sniff::both;
use super::table::{named_for, Accepts, FileReader, FileRule, Row};
use super::Sniffed;
use super::{pickle_file, pickle_start, safetensors, sink, Scope, Sink};
use crate::error::{Error, Result};
use crate::{Format, HostBuffer};
use std::path::Path;
use std::sync::Arc;

/// A safetensors header CPython would also run as a pickle: ahead of safetensors' own row.
pub(crate) const ROW: Row = Row {
    what: "both safetensors and a pickle",
    loader: "safetensors.safe_open, torch.load",
    extensions: &[],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Polyglot,
        accepts: |prefix| {
            both(safetensors::looks_like_safetensors_in(prefix), || {
                pickle_start::begins_pickle_in(prefix)
            })
        },
        read: Some(FileReader {
            read: read_into,
            index: Format::PytorchIndex,
            reads_pickle: true,
        }),
    }),
};

/// What a file [`sniff`](super::sniff) called a polyglot is, from its whole `bytes` and the
/// name's extension (ASCII case ignored): safetensors when CPython would not run it as a
/// pickle, a pickle when its name is one `torch.load` is handed, otherwise still a polyglot,
/// which this reader reads as safetensors under a `.safetensors` name and refuses under any
/// other.
pub(crate) fn settle(path: &Path, bytes: &[u8]) -> Sniffed {
    if !pickle_start::begins_pickle(bytes) {
        Sniffed::Format(Format::Safetensors)
    } else if named_for(path, Some(runs_pickles)) {
        Sniffed::Format(Format::Pickle)
    } else {
        Sniffed::Polyglot
    }
}

/// A loader that unpickles what it is handed (transformers' `pytorch_model.bin`, Lightning's
/// `.ckpt`, `.pt`/`.pth` go to `torch.load`; `.pkl` to `pickle.load`).
fn runs_pickles(loader: &str) -> bool {
    loader == "torch.load" || loader == "pickle.load"
}

/// Whether `path` is named for `safe_open`.
fn named_safetensors(path: &Path) -> bool {
    named_for(path, Some(|loader| loader == safetensors::ROW.loader))
}

pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    match settle(buffer.source(), buffer.bytes()) {
        Sniffed::Format(Format::Safetensors) => safetensors::read_into(buffer, sink),
        Sniffed::Format(Format::Pickle) => pickle_file::read_into(buffer, sink),
        _ if named_safetensors(buffer.source()) => {
            let globals = pickle_globals(buffer, sink);
            match safetensors::read_into(buffer, sink) {
                Ok(format) => {
                    sink.add_unsafe_globals(globals);
                    Ok(format)
                }
                Err(e) => Err(e.with_unsafe_globals(globals)),
            }
        }
        _ => {
            let globals = pickle_globals(buffer, sink);
            Err(refusal(buffer).with_unsafe_globals(globals))
        }
    }
}

/// The globals of the pickle reading, read aside: its tensors are no part of the file's.
pub(crate) fn pickle_globals(
    buffer: &Arc<HostBuffer>,
    sink: &Sink<'_>,
) -> Vec<crate::pickle::UnsafeGlobal> {
    match sink::apart(sink.meter(), Scope::default(), |pickle| {
        pickle_file::read_into(buffer, pickle)
    }) {
        (Err(e), _) => e.unsafe_globals().to_vec(),
        (Ok(_), globals) => globals,
    }
}

/// The refusal of a file no name settles.
fn refusal(buffer: &Arc<HostBuffer>) -> Error {
    Error::AmbiguousFormat {
        path: buffer.source().to_owned(),
        reason: "its bytes are both a safetensors file (read by safe_open) and a pickle \
                 (run by torch.load and pickle.load), and its name says neither; name it \
                 .safetensors or re-save it"
            .into(),
    }
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
        // safe_open is the loader of a .safetensors name, and reads the header; the pickle's
        // globals are named all the same.
        let error = read("model.safetensors", &bytes).expect_err("trailing pickle bytes");
        assert!(names_global(&error), "{error}");
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
        // Judged whole, before any reader is chosen, so an index's shards agree on one format.
        assert_eq!(sniff(&bytes), Sniffed::Format(Format::Safetensors));
        assert_eq!(
            settle(Path::new("pytorch_model"), &bytes),
            Sniffed::Format(Format::Safetensors)
        );
        let ckpt = read("pytorch_model", &bytes).expect("safetensors");
        assert_eq!(ckpt.format, Format::Safetensors);
    }
}
