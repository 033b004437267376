//! `torch.save` zip archives (PyTorch ≥ 1.6) and `torch.jit.save` TorchScript archives.
//!
//! [`Zip`] opens the archive as PyTorch's own reader does and refuses one any other reader
//! could read differently; stored records (every storage `torch.save` writes) are then
//! borrowed straight from the mapped file; deflated ones stay compressed there
//! ([`DataPtr::deferred`]), checked by inflating them in [`INFLATE_CHUNK`] pieces, and are
//! inflated whole onto the heap only for a load that needs every byte in memory. Besides the pickles `torch.load` runs, every other pickle in the archive has its
//! globals audited: another loader may run it.

use super::torchscript::{read_code, Declared};
use super::{add_member, byteswap, Member, StorageRecord, StorageSource};
use crate::error::{Error, Result};
use crate::load::limits::Meter;
use crate::load::numpy;
use crate::load::pickle_start::{begins, begins_pickle, Begins};
use crate::load::table::{Accepts, Row, ZipKind};
use crate::load::zip::{Entry, Zip};
use crate::load::{Scope, Sink};
use crate::pickle::weights_only::{replay_read, Persistent};
use crate::pickle::{unpickle, Loader, WeightsOnly};
use crate::torchscript_code::TorchScriptCode;
use crate::{DType, DataPtr, Format, HeldAs, HostBuffer};
use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use crate::inflate::release_read;
use crate::inflate::INFLATE_CHUNK;

/// A zip archive opened as PyTorch's reader opens it: every record under one folder.
pub(crate) struct Archive<'a> {
    pub buffer: &'a Arc<HostBuffer>,
    pub zip: Zip<'a>,
    pub prefix: String,
    big_endian: bool,
    /// Per entry, by central-directory index: already read as a pickle or a storage record.
    read: Vec<bool>,
    /// The read's memory account.
    pub meter: &'a Meter,
}

impl<'a> Archive<'a> {
    pub fn path(&self) -> &Path {
        self.buffer.source()
    }

    pub fn err(&self, part: &str, detail: impl Into<String>) -> Error {
        Error::Malformed {
            path: self.path().to_owned(),
            part: part.to_owned(),
            detail: detail.into(),
        }
    }

    pub fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            return name.to_owned();
        }
        format!("{}/{name}", self.prefix)
    }

    /// The central-directory index of the entry PyTorch's reader finds for a record name
    /// (under the archive's folder).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.zip.position(&[&self.prefix], name)
    }

    /// The entry PyTorch's reader finds for a record name (under the archive's folder).
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        self.indexed(name).map(|(_, entry)| entry)
    }

    /// [`entry`](Self::entry) with its central-directory index.
    pub fn indexed(&self, name: &str) -> Option<(usize, &Entry)> {
        let index = self.position(name)?;
        Some((index, self.zip.entries().get(index)?))
    }

    /// Notes the entry at `index` as read, so [`audit_other_pickles`] passes it by.
    pub fn mark_read(&mut self, index: usize) {
        if let Some(read) = self.read.get_mut(index) {
            *read = true;
        }
    }

    /// Whether the entry at `index` was read as a pickle or a storage record.
    pub fn was_read(&self, index: usize) -> bool {
        self.read.get(index).is_some_and(|&read| read)
    }

    /// A record's bytes, or `None` when the archive has no such record.
    pub fn read(&mut self, name: &str) -> Result<Option<Cow<'a, [u8]>>> {
        match self.position(name) {
            Some(index) => self.read_at(index).map(Some),
            None => Ok(None),
        }
    }

    /// The bytes of the entry at `index`, noted as read.
    pub fn read_at(&mut self, index: usize) -> Result<Cow<'a, [u8]>> {
        self.mark_read(index);
        match self.zip.entries().get(index) {
            Some(entry) => self.inflate(entry),
            None => Ok(Cow::Borrowed(&[])),
        }
    }

    /// An entry's bytes, once what inflating it would take fits the memory budget.
    pub fn inflate(&self, entry: &Entry) -> Result<Cow<'a, [u8]>> {
        if !entry.is_stored() {
            self.meter.check(self.path(), entry.size, || {
                format!("inflating {}", entry.name)
            })?;
        }
        self.zip.read(entry)
    }
}

/// `torch.save` and `torch.jit.save` archives, which the archive's records tell apart: the
/// zip kind that claims any archive no other kind claims (`torch.load` reads every zip).
pub(crate) const ROW: Row = Row {
    what: "a PyTorch zip archive",
    loader: "torch.load, torch.jit.load",
    extensions: &["pt", "pth", "bin", "ckpt"],
    accepts: Accepts::Records(ZipKind {
        archive: archive_of,
        claims: |_| Ok(true),
        read: read_archive,
    }),
};

/// Opens `buffer` as a zip archive, its memory accounted in `meter`.
pub(crate) fn open_archive<'a>(
    buffer: &'a Arc<HostBuffer>,
    meter: &'a Meter,
) -> Result<Archive<'a>> {
    let zip = open_zip(buffer, meter)?;
    archive_of(buffer, zip, meter)
}

/// Reads and checks the zip structure of `buffer`.
pub(crate) fn open_zip<'a>(buffer: &'a HostBuffer, meter: &Meter) -> Result<Zip<'a>> {
    let zip = Zip::open(buffer, meter)?;
    // Checking every local header read the whole file when its records are small; none of
    // it need stay resident while the pickle's values are built.
    buffer.release(0..buffer.len());
    Ok(zip)
}

/// An archive without a folder, its records named from the archive's root (`torch.export`
/// archives before torch 2.7, which torch reads with Python's zipfile).
pub(crate) fn flat_archive<'a>(
    buffer: &'a Arc<HostBuffer>,
    zip: Zip<'a>,
    meter: &'a Meter,
) -> Result<Archive<'a>> {
    Ok(Archive {
        buffer,
        prefix: String::new(),
        big_endian: false,
        read: vec![false; zip.entries().len()],
        zip,
        meter,
    })
}

/// The archive PyTorch's reader sees in `zip`: every record under the first entry's folder.
pub(crate) fn archive_of<'a>(
    buffer: &'a Arc<HostBuffer>,
    zip: Zip<'a>,
    meter: &'a Meter,
) -> Result<Archive<'a>> {
    let zip_err = |detail: String| Error::Malformed {
        path: buffer.source().to_owned(),
        part: "zip".into(),
        detail,
    };
    // PyTorch resolves every record under the first central entry's top folder, and refuses
    // an archive with any entry outside it (`getAllRecords`, which every torch.load calls).
    let first = zip.entries().first().map_or("", |e| e.name.as_str());
    let prefix = first
        .split_once('/')
        .map(|(top, _)| top.to_owned())
        .ok_or_else(|| zip_err(format!("first entry '{first}' is not inside a folder")))?;
    let folder = format!("{prefix}/");
    if let Some(outside) = zip.entries().iter().find(|e| !e.name.starts_with(&folder)) {
        return Err(zip_err(format!(
            "entry '{}' is outside the archive's folder '{folder}'",
            outside.name
        )));
    }
    Ok(Archive {
        buffer,
        prefix,
        big_endian: false,
        read: vec![false; zip.entries().len()],
        zip,
        meter,
    })
}

/// Reads one `torch.save` or `torch.jit.save` archive through `sink`; returns which it is.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, sink: &mut Sink<'_>) -> Result<Format> {
    read_archive(open_archive(buffer, sink.meter())?, sink)
}

/// [`read_into`] for an archive already open.
pub(crate) fn read_archive(mut archive: Archive<'_>, sink: &mut Sink<'_>) -> Result<Format> {
    let byteorder = archive.read("byteorder")?;
    archive.big_endian = match byteorder.as_deref() {
        None | Some(b"little") => false,
        Some(b"big") => true,
        Some(other) => {
            let other = String::from_utf8_lossy(other).into_owned();
            return Err(archive.err(
                &archive.full_name("byteorder"),
                format!("unknown byte order {other:?}"),
            ));
        }
    };
    // torch.load's test (`_is_torchscript_zip`) compares record names exactly.
    let constants = archive.full_name("constants.pkl");
    let torchscript = archive.zip.entries().iter().any(|e| e.name == constants);
    // torch.jit.load finds it ignoring case: a case variant makes the archive TorchScript to
    // one loader and a torch.save archive to the other.
    if let Some(variant) = archive.entry("constants.pkl").filter(|_| !torchscript) {
        return Err(Error::AmbiguousArchive {
            path: archive.path().to_owned(),
            reason: format!(
                "'{}' is {constants} to torch.jit.load, which matches names ignoring case, but \
                 not to torch.load, which tells TorchScript archives by the exact name",
                variant.name
            ),
        });
    }
    // `torch.load` hands such an archive to `torch.jit.load`, whose unpickler resolves names.
    let loader = if torchscript {
        sink.weights_only(WeightsOnly::refuses(
            &constants,
            "Cannot use ``weights_only=True`` with TorchScript archives passed to ``torch.load``.",
        ));
        Loader::TorchScript
    } else {
        Loader::Python
    };

    // The code first: its classes say what data.pkl's objects hold their tensors as.
    let code = match torchscript {
        true => Some(archive_code(&mut archive)?),
        false => None,
    };
    let declared = code.as_ref().map(|(_, declared)| declared);
    let found = add_pickle(&mut archive, sink, "data.pkl", "data", loader, declared)?;
    if !found {
        let data_name = archive.full_name("data.pkl");
        return Err(archive.err("zip", format!("no {data_name}: not a PyTorch archive")));
    }
    if let Some((code, _)) = code {
        // TorchScript keeps constant tensors apart, their records under `constants/`; the
        // code calls the n-th `CONSTANTS.c<n>`. (A traced module's `traced_inputs.pkl`
        // describes its example inputs, but torch writes their records empty.)
        let scope = Scope::default()
            .keys("constants/")
            .name_prefix("CONSTANTS.c")
            .held_as(HeldAs::Constant);
        let constants = &mut sink.nested(scope);
        add_pickle(
            &mut archive,
            constants,
            "constants.pkl",
            "constants",
            loader,
            None,
        )?;
        sink.set_torchscript(code);
    }
    audit_other_pickles(&archive, loader, sink)?;
    Ok(if torchscript {
        Format::Torchscript
    } else {
        Format::PytorchZip
    })
}

/// The code of a TorchScript archive, and what its classes declare.
fn archive_code(archive: &mut Archive<'_>) -> Result<(TorchScriptCode, Declared)> {
    let names: Vec<String> = archive
        .zip
        .entries()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    let prefix = archive.prefix.clone();
    read_code(&prefix, names.iter().map(String::as_str), |name| {
        Ok(archive.read(name)?.map(Cow::into_owned))
    })
}

/// Runs one pickle member and adds its tensors, their records found under `folder`;
/// `false` when the archive has no such member.
fn add_pickle(
    archive: &mut Archive<'_>,
    sink: &mut Sink<'_>,
    name: &str,
    folder: &str,
    loader: Loader,
    declared: Option<&Declared>,
) -> Result<bool> {
    let Some(bytes) = archive.read(name)? else {
        return Ok(false);
    };
    let full_name = archive.full_name(name);
    let path = archive.buffer.source();
    let budget = archive.meter.pickle_budget();
    let mut unpickled = unpickle(&bytes, path, &full_name, 0, loader, &budget)?;
    if loader == Loader::Python {
        // Read to its STOP: the keys it fetched spare the replay finding its own.
        let fetched = std::mem::take(&mut unpickled.fetched);
        // Beside the values the machine built, which are still held.
        let budget = budget.holding(unpickled.bytes);
        let verdict = match replay_read(&bytes, Persistent::Zip, fetched, &budget) {
            Ok(verdict) => verdict,
            Err(overrun) => {
                let globals = std::mem::take(&mut unpickled.unsafe_globals);
                let e = overrun.into_error(path, &full_name, &budget);
                return Err(e.with_unsafe_globals(globals));
            }
        };
        sink.weights_only(match verdict {
            Ok(()) => WeightsOnly::Loads,
            Err(reason) => WeightsOnly::refuses(&full_name, reason),
        });
    }
    // Read through: the directory, every local header and the pickle (the whole file, for
    // a hundred thousand small records) need not stay resident beside the values built from
    // them; what is read again faults back in from the file.
    archive.buffer.release(0..archive.buffer.len());
    let member = Member {
        path,
        name: &full_name,
        unpickled,
        declared,
    };
    let mut records = Records {
        archive,
        folder,
        next: 0,
    };
    add_member(member, &mut records, &budget, sink)?;
    Ok(true)
}

/// Bytes of a deflated member inflated to tell whether it may hold a pickle or an array.
const MEMBER_PEEK: usize = 64 << 10;

/// The members the archive's own reader left unread, judged by every other loader that would
/// read them. `np.load` opens any zip as an `NpzFile`, and `NpzFile[key]` unpickles an object
/// array in any member that begins `\x93NUMPY`, whatever its name or folder; a script (or
/// torch.package) unpickles `extra.pkl`. So every member that is an `.npy` object array has its
/// pickle's globals recorded, and so has every member CPython would run as a pickle, whatever
/// its first byte (protocol 0 and 1 streams begin with no PROTO), judged by the loader that
/// reads the archive. One that must be read and cannot be is refused (fail closed).
pub(crate) fn audit_other_pickles(
    archive: &Archive<'_>,
    loader: Loader,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let path = archive.path();
    for (index, entry) in archive.zip.entries().iter().enumerate() {
        if archive.was_read(index) {
            continue;
        }
        let named = ends_with_caseless(&entry.name, ".pkl");
        let head = archive.zip.peek(entry, MEMBER_PEEK)?;
        let npy = head.starts_with(numpy::MAGIC);
        if !named && !npy && begins(&head) == Begins::NotPickle {
            continue;
        }
        let bytes = archive.inflate(entry)?;
        if npy {
            numpy::member_globals(path, &entry.name, &bytes, sink)?;
            continue;
        }
        if !named && !begins_pickle(&bytes) {
            continue;
        }
        let budget = archive.meter.pickle_budget();
        // A TorchScript archive's other pickles (`*.debug_pkl`) are torch.jit.load's to read.
        let unpickled = unpickle(&bytes, path, &entry.name, 0, loader, &budget)?;
        sink.add_unsafe_globals(unpickled.unsafe_globals);
    }
    Ok(())
}

/// Whether `name` ends with `suffix` ignoring ASCII case, without lowercasing a copy.
fn ends_with_caseless(name: &str, suffix: &str) -> bool {
    name.len()
        .checked_sub(suffix.len())
        .and_then(|start| name.as_bytes().get(start..))
        .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix.as_bytes()))
}

/// Storage records of one archive folder (`data/<key>`, TorchScript's `constants/<key>`).
struct Records<'a, 'b> {
    archive: &'a mut Archive<'b>,
    folder: &'a str,
    /// The entry after the last record found: where the next one most likely is.
    next: usize,
}

impl StorageSource for Records<'_, '_> {
    fn data_ptr(
        &mut self,
        record: &StorageRecord,
        dtype: DType,
        nbytes: u64,
    ) -> Result<Option<DataPtr>> {
        let archive = &mut *self.archive;
        let index =
            archive
                .zip
                .position_from(self.next, &[&archive.prefix, self.folder], &record.key);
        if let Some(found) = index {
            self.next = found.saturating_add(1);
        }
        // The record's full name, built only for an error.
        let folder = self.folder;
        let full = |archive: &Archive<'_>| {
            let name = if folder.is_empty() {
                Cow::Borrowed(&*record.key)
            } else {
                Cow::Owned(format!("{folder}/{}", record.key))
            };
            archive.full_name(&name)
        };
        let Some((index, entry)) = index.and_then(|i| Some((i, archive.zip.entries().get(i)?)))
        else {
            if record.location == "meta" {
                return Ok(None);
            }
            return Err(archive.err(&full(archive), "storage record is missing"));
        };
        if entry.size != nbytes {
            return Err(archive.err(
                &full(archive),
                format!(
                    "record holds {} bytes but the pickle describes {nbytes} ({} {dtype})",
                    entry.size, record.numel
                ),
            ));
        }
        if entry.is_stored() && !archive.big_endian {
            let start = entry.data_start();
            archive.mark_read(index);
            let end = start.checked_add(nbytes).ok_or(Error::Overflow {
                what: "storage record end",
            })?;
            return DataPtr::host(Arc::clone(archive.buffer), start..end).map(Some);
        }
        let limits = archive.meter.limits;
        if !limits.hold_storages && !archive.big_endian {
            if let Some(compressed) = archive.zip.deflated_range(entry)? {
                if limits.storage_bytes {
                    // torch.load inflates every record and refuses one of the wrong size:
                    // checked here, one piece at a time, so a scan later cannot meet it.
                    let buffer = archive.buffer;
                    let mut released = compressed.start;
                    archive
                        .zip
                        .inflate_each(entry, INFLATE_CHUNK, |_, _, consumed| {
                            released = release_read(buffer, released, consumed);
                        })?;
                }
                archive.mark_read(index);
                // The bytes stay compressed in the file; a scan inflates them piece by piece.
                let buffer = Arc::clone(archive.buffer);
                return Ok(Some(DataPtr::deferred(buffer, compressed, nbytes)));
            }
        }
        let mut bytes = archive.read_at(index)?.into_owned();
        // Held with the checkpoint: charged for the rest of the read.
        archive.meter.hold(archive.path(), nbytes, || {
            format!("storage record {}", full(archive))
        })?;
        if archive.big_endian {
            byteswap(&mut bytes, dtype);
        }
        Ok(Some(DataPtr::heap(archive.path(), bytes)))
    }
}
