//! Checkpoints held as a pickle's byte strings: a `torch.save` archive (zip or legacy stream),
//! an `.npy` or `.npz`, or a pickle stream, stored as a `bytes` value that the library owning
//! the object hands to its loader when it is unpickled (skorch's `NeuralNet.__setstate__`
//! unpickles `__cuda_dependent_attributes__`, older skorch `torch.load`s it). Each is read as
//! its own loader reads it, never run, under the value's path: its tensors are named
//! `<path>.<name>`, its storage keys `<path>/<key>`, its globals under `<member>:<path>`, so
//! what the inner bytes name judges the file that holds them.
//!
//! What counts is decided by the bytes alone, and narrowly (a zip's local header, NumPy's
//! magic, a protocol 2+ pickle CPython would run): a byte string of text or array data is data.
//! Nested archives nest at most [`MAX_DEPTH`] deep; deeper is refused, as is one whose bytes
//! do not fit the read's memory budget.

use super::{pickle_start, reader, sniff, Scope, Sink, Sniffed};
use crate::error::{Error, Result};
use crate::{Format, HostBuffer};
use std::path::Path;

/// How many archives deep a nested archive may lie (an archive in a pickle in an archive…).
pub(crate) const MAX_DEPTH: usize = 4;

/// Whether a byte string may hold a checkpoint, by its first bytes alone: what a walk of a
/// pickle's values asks of every reference to it, so it costs nothing however long it is.
/// [`is_nested`] settles it once per byte string.
pub(crate) fn may_be_nested(bytes: &[u8]) -> bool {
    // PROTO 2 to 5: what torch.save's legacy stream and every modern pickle start with. Protocol
    // 0 and 1 start with whatever they push, as text may: such bytes are left as data.
    bytes.starts_with(b"PK\x03\x04")
        || bytes.starts_with(super::numpy::MAGIC)
        || matches!(bytes, [0x80, 2..=5, ..])
}

/// Whether a byte string holds a checkpoint read as a nested archive: a zip, an `.npy`, or a
/// protocol 2+ pickle CPython would run (walked whole).
pub(crate) fn is_nested(bytes: &[u8]) -> bool {
    may_be_nested(bytes) && (!bytes.starts_with(b"\x80") || pickle_start::begins_pickle(bytes))
}

/// Reads `bytes`, the value named `name` in member `member` of `path`, through `sink` as the
/// checkpoint it holds.
pub(crate) fn read(
    path: &Path,
    member: &str,
    name: &str,
    bytes: Box<[u8]>,
    sink: &mut Sink<'_>,
) -> Result<()> {
    read_at(path, &format!("{member}:{name}"), name, bytes, sink)
}

/// Reads `bytes` through `sink` as the checkpoint they hold, from `place` in `path` (where its
/// globals are named and its errors point), its tensors named under `name`.
pub(crate) fn read_at(
    path: &Path,
    place: &str,
    name: &str,
    bytes: Box<[u8]>,
    sink: &mut Sink<'_>,
) -> Result<()> {
    if !is_nested(&bytes) {
        // Array data or text that only begins like a pickle: data, as to every loader.
        return Ok(());
    }
    let place = place.to_owned();
    if sink.archive_depth() >= MAX_DEPTH {
        return Err(Error::Malformed {
            path: path.to_owned(),
            part: place,
            detail: format!("archives nested more than {MAX_DEPTH} deep"),
        });
    }
    // The bytes leave the pickle's values, which are freed, and are held for the rest of the
    // read: their storages view them.
    sink.meter().hold(path, bytes.len() as u64, || {
        format!("nested archive {place}")
    })?;
    let sniffed = sniff(&bytes);
    let Some(nested) = reader(sniffed).filter(|_| readable(sniffed)) else {
        return Err(Error::Malformed {
            path: path.to_owned(),
            part: place,
            detail: format!(
                "nested bytes are {sniffed:?}, which no loader of a pickle's value reads"
            ),
        });
    };
    let buffer = HostBuffer::from_vec(path.join(&place), bytes.into_vec());
    let scope = Scope::default()
        .under(name)
        .keys(format!("{name}/"))
        .member(place.clone())
        .archive();
    // The globals named so far are set aside: a refusal inside takes back what the sink holds,
    // and must name only what the nested bytes name.
    let before = sink.take_unsafe_globals(0);
    let read = (nested.file.read)(&buffer, &mut sink.nested(scope));
    sink.restore_unsafe_globals(before);
    let format = read.map_err(|e| placed(e, &place))?;
    match format {
        Format::PytorchZip
        | Format::PytorchLegacy
        | Format::Numpy
        | Format::NumpyArchive
        | Format::Pickle
        | Format::Joblib => Ok(()),
        other => Err(Error::Malformed {
            path: path.to_owned(),
            part: place,
            detail: format!("nested archive is {other}, which is not read inside a pickle"),
        }),
    }
}

/// A refusal of the nested bytes as seen from their container: the globals its readers carry
/// as their pickles named them are placed under `place`, as the sink placed those it took back.
fn placed(error: Error, place: &str) -> Error {
    let under = format!("{place}/");
    error.map_unsafe_globals(|g| {
        if !g.member.starts_with(&under) {
            g.nest_under(place);
        }
    })
}

/// What a byte string may be read as: what `torch.load`, `np.load` and `pickle.loads` take.
fn readable(sniffed: Sniffed) -> bool {
    matches!(
        sniffed,
        Sniffed::Zip
            | Sniffed::Format(
                Format::PytorchLegacy | Format::Numpy | Format::Pickle | Format::Joblib
            )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_archives_and_protocol_2_pickles_are_nested_checkpoints() {
        // The walk's test looks at the first bytes only; the read's walks the pickle.
        assert!(may_be_nested(b"\x80\x02\xff\xfe\x00\x00"));
        assert!(!may_be_nested(b"(dp0\n."));
        assert!(is_nested(b"PK\x03\x04rest"));
        assert!(is_nested(b"\x93NUMPY\x01\x00v\x00{"));
        // `pickle.dumps({}, protocol=2)`, and a legacy torch.save's magic number.
        assert!(is_nested(b"\x80\x02}q\x00."));
        assert!(is_nested(
            b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."
        ));
        // Text, array data, an empty string, a protocol 0 pickle: data.
        assert!(!is_nested(b"PK but no zip"));
        assert!(!is_nested(b"\x80\x02\xff\xfe\x00\x00"));
        assert!(!is_nested(b""));
        assert!(!is_nested(b"(dp0\n."));
        assert!(!is_nested(b"N."));
    }
}
