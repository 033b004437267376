//! Plain pickle files (`pickle.dump`, `.pkl`, a distributed checkpoint's `.metadata`): every
//! pickle stream in the file, back to back, run by the same non-executing machine and
//! allowlist as PyTorch's pickles.
//!
//! What "tensors" means here: the tensors the objects reach, named as in a `torch.save` file.
//! `pickle.load` has no `persistent_load`, so CPython raises at a persistent id, and this
//! reader refuses one too. `pickle.dump(tensor)` stores the storage as a nested legacy
//! `torch.save` of it alone, handed to `torch.storage._load_from_bytes`: that call stays a
//! global outside the allowlist (named, TP501), but its bytes are read as data, never run
//! (`load::torch::legacy::storage_alone`, refused unless they hold exactly one storage), so
//! the tensors rebuilt over it are listed with their elements, as are tensors saved without
//! storage (meta tensors). A pickle of numpy arrays or Python values lists none, and its
//! globals are what the audit judges.
//!
//! A joblib file (`joblib.dump`) is such a pickle with each array's bytes written after the
//! BUILD of the `NumpyArrayWrapper` standing for it: every stream is read with joblib's
//! [`Arrays`], so those arrays are tensors over the file's bytes and the file is a joblib one.

use super::joblib::{names_a_wrapper, Arrays, InlineStorages};
use super::table::{Accepts, FileReader, FileRule, Row};
use super::torch::{add_member, Member, StorageRecord, StorageSource};
use super::{pickle_start, Scope, Sink, Sniffed};
use crate::error::{Error, Result};
use crate::pickle::allowlist::Loader;
use crate::pickle::weights_only::{replay_holding, Persistent};
use crate::pickle::{unpickle, unpickle_inline, Budget, UnsafeGlobal, WeightsOnly};
use crate::{DType, DataPtr, Format, HostBuffer};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// The member name plain pickles report positions under; positions are file offsets.
pub const MEMBER: &str = "<pickle>";

/// Whatever CPython's unpickler would run: `pickle.load`, and `np.load`'s, `joblib.load`'s and
/// `torch.load`'s fallback for what their other rules do not take (joblib's uncompressed files
/// among them).
pub(crate) const ROW: Row = Row {
    what: "a plain pickle",
    loader: "pickle.load",
    extensions: &["pkl", "pickle", "dill"],
    accepts: Accepts::Bytes(FileRule {
        sniffed: Sniffed::Format(Format::Pickle),
        accepts: pickle_start::begins_pickle_in,
        read: Some(FileReader {
            read: read_into,
            index: Format::PytorchIndex,
            reads_pickle: true,
        }),
    }),
};

/// Reads every stream of one plain pickle file through `sink`. `pickle.load` stops at the first
/// STOP, but a caller that loads again runs the next stream, so all are read; bytes after a
/// STOP that CPython would run as a pickle must be read as one (or the file is refused), and
/// bytes it would refuse before running anything are data no loader runs (a text that begins
/// `N.`, a pickle of `None`, goes on as prose).
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    // torch.load reads a file that is neither zip nor tar as a legacy stream, whose first
    // pickle must be the magic number: it refuses every plain pickle, the question is why.
    // A replay past the budget leaves only that unanswered: the file is read on.
    let budget = sink.meter().pickle_budget();
    let (replayed, reached) = replay_holding(buffer.bytes(), Persistent::Refused, &budget);
    let reason = match replayed {
        Ok(Ok(())) => "Invalid magic number; corrupt file?".into(),
        Ok(Err(reason)) => reason,
        Err(overrun) => format!(
            "refused as every plain pickle is; why was not worked out: its weights-only \
             reading would hold more than --max-memory allows (at byte {})",
            overrun.at
        ),
    };
    sink.weights_only(WeightsOnly::refuses(MEMBER, reason));
    if reached >= HANDED_BACK {
        crate::memory::hand_back();
    }
    match read_streams(buffer, sink)? {
        true => Ok(Format::Joblib),
        false => Ok(Format::Pickle),
    }
}

/// Lists a reading reached past which what it freed is handed back before the next reading.
const HANDED_BACK: u64 = 16 << 20;

/// Reads every stream of `buffer` (a file, or a compressed joblib file's inflated stream)
/// through `sink`; says whether joblib arrays were among what they hold.
pub(crate) fn read_streams(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<bool> {
    let budget = sink.meter().pickle_budget();
    let path = buffer.source();
    let arrays = Arrays {
        path,
        member: MEMBER,
        budget: &budget,
    };
    let mut pos = 0u64;
    let mut index = 0usize;
    let mut joblib = false;
    // The globals read so far are in the sink: any refusal that follows names them (taken
    // from there, never copied: a pickle can name thousands of long globals).
    while pos < buffer.len() {
        let rest = usize::try_from(pos)
            .ok()
            .and_then(|p| buffer.bytes().get(p..))
            .unwrap_or_default();
        if index > 0 && !pickle_start::begins_pickle(rest) {
            break;
        }
        let mut unpickled = match unpickle_inline(rest, path, MEMBER, pos, &budget, &arrays) {
            Ok(unpickled) => unpickled,
            Err(e) => {
                // Refused though CPython runs it to its STOP (its frames, say): the streams
                // after it are still there for a caller that loads again.
                let mut named = sink.take_unsafe_globals(0);
                if names_a_wrapper(e.unsafe_globals()) {
                    named.extend(as_pickle_load_reads(rest, path, pos, &budget));
                }
                if e.over_budget() {
                    // Refused for what its values would take: CPython reads on through.
                    crate::memory::hand_back();
                    let known = named.iter().chain(e.unsafe_globals());
                    let walked =
                        pickle_start::unsafe_globals_walked(rest, MEMBER, pos, known, &budget);
                    named.extend(walked);
                }
                if let Some(end) = pickle_start::stream_end(rest) {
                    named.extend(globals_after(buffer, pos + end as u64, &budget));
                }
                return Err(e.with_unsafe_globals(named));
            }
        };
        // Each joblib array is a storage among the persistent ids; any other is the stream's.
        let inline = std::mem::take(&mut unpickled.inline);
        if unpickled.persistent.len() > inline.len() {
            let refused = Error::Pickle {
                path: path.to_owned(),
                member: MEMBER.to_owned(),
                position: pos,
                detail: format!(
                    "the stream holds {} persistent ids, which plain `pickle.load` refuses \
                     (it has no persistent_load): no storage data exists for them",
                    unpickled.persistent.len() - inline.len()
                ),
            };
            let after = globals_after(buffer, pos + unpickled.len.max(1), &budget);
            let mut named = sink.take_unsafe_globals(0);
            named.extend(unpickled.unsafe_globals);
            named.extend(after);
            return Err(refused.with_unsafe_globals(named));
        }
        if unpickled.inlined > 0 {
            // Looked up, not compared pairwise: a stream may name thousands of long globals.
            let named: HashSet<_> = unpickled.unsafe_globals.iter().map(place).collect();
            let plain = as_pickle_load_reads(rest, path, pos, &budget);
            let more: Vec<_> = plain
                .into_iter()
                .filter(|g| !named.contains(&place(g)))
                .collect();
            unpickled.unsafe_globals.extend(more);
        }
        // A pickle ends with its STOP, inside `rest`: the next one starts within the file.
        let len = unpickled.len.max(1);
        joblib |= unpickled.inlined > 0;
        let name_prefix = match index {
            0 => String::new(),
            i => format!("<pickle {i}>."),
        };
        let member = Member {
            path,
            name: MEMBER,
            unpickled,
            declared: None,
        };
        let mut inline_storages;
        let mut no_storages = NoStorages { path };
        let storages: &mut dyn StorageSource = match inline.is_empty() {
            true => &mut no_storages,
            false => {
                inline_storages = InlineStorages::new(buffer, sink.meter(), inline);
                &mut inline_storages
            }
        };
        let mut stream = sink.nested(Scope::default().name_prefix(name_prefix));
        if let Err(e) = add_member(member, storages, &budget, &mut stream) {
            let mut named = sink.take_unsafe_globals(0);
            named.extend(globals_after(buffer, pos + len, &budget));
            // The refused stream's own globals are the error's, named after these.
            return Err(e.with_unsafe_globals(named));
        }
        pos += len;
        index += 1;
    }
    Ok(joblib)
}

/// Where a global is named, and what: one stream's globals are the same global there.
fn place(g: &UnsafeGlobal) -> (u64, &str, &str) {
    (g.position, g.module.as_str(), g.name.as_str())
}

/// The globals `pickle.load` (and `torch.load`) resolve in a stream joblib reads otherwise:
/// they read what joblib writes after a wrapper's BUILD as opcodes (an array's bytes, since
/// joblib < 1.2 pads nothing; an object array's nested pickle, run with the outer stream's
/// memo). The two loaders disagree, and what either runs is judged.
fn as_pickle_load_reads(rest: &[u8], path: &Path, pos: u64, budget: &Budget) -> Vec<UnsafeGlobal> {
    match unpickle(rest, path, MEMBER, pos, Loader::Python, budget) {
        Ok(plain) => plain.unsafe_globals,
        Err(e) => e.unsafe_globals().to_vec(),
    }
}

/// The globals of the streams from `pos` on, up to the first that does not parse: a stream
/// refused for what it holds (not how it parses) still leaves the next for a caller that loads
/// again, and the refusal names what they would run.
fn globals_after(buffer: &HostBuffer, mut pos: u64, budget: &Budget) -> Vec<UnsafeGlobal> {
    let arrays = Arrays {
        path: buffer.source(),
        member: MEMBER,
        budget,
    };
    let mut globals = Vec::new();
    while let Some(rest) = usize::try_from(pos)
        .ok()
        .and_then(|p| buffer.bytes().get(p..))
        .filter(|r| !r.is_empty())
    {
        match unpickle_inline(rest, buffer.source(), MEMBER, pos, budget, &arrays) {
            Ok(u) => {
                if u.inlined > 0 {
                    globals.extend(as_pickle_load_reads(rest, buffer.source(), pos, budget));
                }
                globals.extend(u.unsafe_globals);
                pos += u.len.max(1);
            }
            Err(e) => {
                globals.extend(e.unsafe_globals().iter().cloned());
                if names_a_wrapper(e.unsafe_globals()) {
                    globals.extend(as_pickle_load_reads(rest, buffer.source(), pos, budget));
                }
                break;
            }
        }
    }
    globals
}

/// A plain pickle's storages: there are none (persistent ids were refused above).
struct NoStorages<'a> {
    path: &'a Path,
}

impl StorageSource for NoStorages<'_> {
    fn data_ptr(
        &mut self,
        record: &StorageRecord,
        _dtype: DType,
        _nbytes: u64,
    ) -> Result<Option<DataPtr>> {
        Err(Error::Pickle {
            path: self.path.to_owned(),
            member: MEMBER.to_owned(),
            position: 0,
            detail: format!("storage '{}': a plain pickle holds no storages", record.key),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::load::from_buffer;
    use crate::HostBuffer;

    /// `arrays.joblib`, its first array's BUILD, and what follows it rewritten by `patch`,
    /// which is given the bytes after the BUILD up to its `numpy_array_alignment_bytes`-marked
    /// padding and data (9 + 24 bytes).
    fn first_array_patched(unaligned: bool, after_build: &[u8]) -> Vec<u8> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let file = std::fs::read(root.join("fixtures/joblib/arrays.joblib")).unwrap();
        // `K\x10u b` ends the first wrapper's state (alignment 16) and BUILDs it; then the
        // padding length 8, eight 0xff and the 24 bytes of the float32 array.
        let at = file
            .windows(5)
            .position(|w| w == b"K\x10ub\x08")
            .expect("the BUILD");
        let mut bytes = file[..at].to_vec();
        if unaligned {
            // Without the alignment attribute (joblib < 1.2) the data follows the BUILD at
            // once; `None` is a byte shorter than `K\x10`, and so is the FRAME holding it.
            let frame = (0..at)
                .rev()
                .find(|&p| {
                    bytes[p] == 0x95
                        && bytes.get(p + 1..p + 9).is_some_and(|n| {
                            p + 9 + u64::from_le_bytes(n.try_into().unwrap()) as usize == at + 4
                        })
                })
                .expect("the FRAME ending at the BUILD");
            let len = u64::from_le_bytes(bytes[frame + 1..frame + 9].try_into().unwrap()) - 1;
            bytes[frame + 1..frame + 9].copy_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(b"Nub");
        } else {
            bytes.extend_from_slice(b"K\x10ub");
        }
        bytes.extend_from_slice(after_build);
        bytes.extend_from_slice(&file[at + 4 + 9 + 24..]);
        bytes
    }

    #[test]
    fn padding_joblib_does_not_write_is_refused() {
        // A padding length of 99 is GLOBAL to pickle.load, and the padding a call of os.system.
        let mut padding = b"cos\nsystem\n(S'true'\ntR0".to_vec();
        padding.resize(100, b'N');
        padding.extend_from_slice(&[0u8; 24]);
        let bytes = first_array_patched(false, &padding);
        let error = from_buffer(HostBuffer::from_vec("a.joblib", bytes)).expect_err("refused");
        assert!(
            error.to_string().contains("not what joblib writes"),
            "{error}"
        );
    }

    #[test]
    fn globals_pickle_load_would_run_in_unpadded_array_bytes_are_named() {
        // joblib < 1.2 writes the data right after the BUILD: joblib.load reads 24 bytes of
        // float32, pickle.load a call of os.system.
        let data = b"cos\nsystem\n(S'true'\ntR0N";
        assert_eq!(data.len(), 24);
        let bytes = first_array_patched(true, data);
        let start = bytes
            .windows(3)
            .position(|w| w == b"Nub")
            .expect("the BUILD") as u64
            + 3;
        let checkpoint =
            from_buffer(HostBuffer::from_vec("a.joblib", bytes)).expect("joblib reads it");
        let named: Vec<(&str, &str, u64)> = checkpoint
            .unsafe_globals
            .iter()
            .map(|g| (g.module.as_str(), g.name.as_str(), g.position))
            .collect();
        assert!(named.contains(&("os", "system", start)), "{named:?}");
    }

    #[test]
    fn a_refused_stream_names_the_globals_of_the_streams_after_it() {
        // A persistent id plain pickle.load cannot take, then a stream calling os.system: a
        // caller that loads again runs it.
        let mut bytes = b"\x80\x02K\x01Q.".to_vec();
        bytes.extend_from_slice(b"cos\nsystem\n(S'true'\ntR.");
        let error = from_buffer(HostBuffer::from_vec("x.pkl", bytes)).expect_err("refused");
        assert!(error.to_string().contains("persistent ids"), "{error}");
        let named: Vec<(&str, &str, u64)> = error
            .unsafe_globals()
            .iter()
            .map(|g| (g.module.as_str(), g.name.as_str(), g.position))
            .collect();
        assert_eq!(named, [("os", "system", 6)]);
        // A stream refused at its STOP (a frame inside a frame, which CPython's C unpickler
        // runs), then the same call.
        let body = b"K\x01.";
        let mut bytes = b"\x80\x04\x95\x0c\0\0\0\0\0\0\0\x95\x03\0\0\0\0\0\0\0".to_vec();
        bytes.extend_from_slice(body);
        let call_at = bytes.len() as u64;
        bytes.extend_from_slice(b"cos\nsystem\n(S'true'\ntR.");
        let error = from_buffer(HostBuffer::from_vec("y.pkl", bytes)).expect_err("refused");
        assert!(error.to_string().contains("FRAME"), "{error}");
        let positions: Vec<u64> = error.unsafe_globals().iter().map(|g| g.position).collect();
        assert_eq!(positions, [call_at], "{error}");
    }
}
