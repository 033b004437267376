//! `torch.save` zip archives (PyTorch ≥ 1.6) and `torch.jit.save` TorchScript archives.
//!
//! The zip crate reads the central directory; stored records (every storage `torch.save`
//! writes) are then borrowed straight from the mapped file, and compressed ones are inflated
//! into bounded heap buffers.

use super::torch::{add_member, byteswap, Member, StorageRecord, StorageSource};
use super::torchscript::read_code;
use super::Parts;
use crate::error::{Error, Result};
use crate::pickle::{unpickle, Budget, Loader};
use crate::{DType, DataPtr, Format, HostBuffer};
use std::collections::HashMap;
use std::io::{Cursor, Read};
use std::path::Path;
use std::sync::Arc;

struct Entry {
    stored: bool,
    data_start: u64,
    compressed_size: u64,
    size: u64,
    index: usize,
}

struct Archive<'a> {
    buffer: &'a Arc<HostBuffer>,
    prefix: String,
    entries: HashMap<String, Entry>,
    zip: zip::ZipArchive<Cursor<&'a [u8]>>,
    big_endian: bool,
}

impl Archive<'_> {
    fn path(&self) -> &Path {
        self.buffer.source()
    }

    fn err(&self, part: &str, detail: impl Into<String>) -> Error {
        Error::Archive {
            path: self.path().to_owned(),
            part: part.to_owned(),
            detail: detail.into(),
        }
    }

    fn full_name(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }

    /// A member's bytes: borrowed when stored, inflated (bounded by its declared size) otherwise.
    fn read(&mut self, name: &str) -> Result<Option<Vec<u8>>> {
        let full = self.full_name(name);
        let Some(entry) = self.entries.get(&full) else {
            return Ok(None);
        };
        if entry.stored {
            return Ok(Some(self.stored_slice(&full)?.to_vec()));
        }
        let (index, size) = (entry.index, entry.size);
        let path = self.buffer.source();
        let fail = |detail: String| Error::Archive {
            path: path.to_owned(),
            part: full.clone(),
            detail,
        };
        let mut file = self.zip.by_index(index).map_err(|e| fail(e.to_string()))?;
        let mut out = Vec::new();
        // The declared size bounds the allocation; a member inflating past it is refused.
        (&mut file)
            .take(size.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(|e| fail(format!("cannot inflate: {e}")))?;
        if out.len() as u64 != size {
            return Err(fail(format!(
                "inflates to {} bytes, not the declared {size}",
                out.len()
            )));
        }
        Ok(Some(out))
    }

    fn stored_slice(&self, full: &str) -> Result<&[u8]> {
        let entry = self
            .entries
            .get(full)
            .ok_or_else(|| self.err(full, "missing"))?;
        let end = entry.data_start.checked_add(entry.compressed_size);
        end.and_then(|end| {
            let start = usize::try_from(entry.data_start).ok()?;
            self.buffer.bytes().get(start..usize::try_from(end).ok()?)
        })
        .ok_or_else(|| self.err(full, "data runs past the end of the file"))
    }
}

fn open_archive(buffer: &Arc<HostBuffer>) -> Result<Archive<'_>> {
    let path = buffer.source();
    let zip_err = |detail: String| Error::Archive {
        path: path.to_owned(),
        part: "zip".into(),
        detail,
    };
    let mut zip = zip::ZipArchive::new(Cursor::new(buffer.bytes()))
        .map_err(|e| zip_err(format!("unreadable archive, truncated or damaged ({e})")))?;
    let mut entries = HashMap::with_capacity(zip.len());
    let mut prefix = None;
    for index in 0..zip.len() {
        let file = zip
            .by_index_raw(index)
            .map_err(|e| zip_err(format!("entry {index}: {e}")))?;
        let name = file
            .name()
            .map_err(|e| zip_err(format!("entry {index}: {e}")))?
            .into_owned();
        if prefix.is_none() {
            // PyTorch resolves every record under the first entry's top folder.
            let top = name.split_once('/').map(|(top, _)| top.to_owned());
            prefix =
                Some(top.ok_or_else(|| {
                    zip_err(format!("first entry '{name}' is not inside a folder"))
                })?);
        }
        let data_start = file
            .data_start()
            .ok_or_else(|| zip_err(format!("{name}: no data offset")))?;
        let entry = Entry {
            stored: file.compression() == zip::CompressionMethod::Stored,
            data_start,
            compressed_size: file.compressed_size(),
            size: file.size(),
            index,
        };
        drop(file);
        if entries.insert(name.clone(), entry).is_some() {
            return Err(zip_err(format!("entry '{name}' appears twice")));
        }
    }
    let prefix = prefix.ok_or_else(|| zip_err("the archive is empty".into()))?;
    Ok(Archive {
        buffer,
        prefix,
        entries,
        zip,
        big_endian: false,
    })
}

/// Reads one zip checkpoint into `parts`; returns which kind of archive it is.
pub(crate) fn read_into(buffer: &Arc<HostBuffer>, parts: &mut Parts) -> Result<Format> {
    let mut archive = open_archive(buffer)?;
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
    let torchscript = archive
        .entries
        .contains_key(&archive.full_name("constants.pkl"));
    // `torch.load` hands such an archive to `torch.jit.load`, whose unpickler resolves names.
    let loader = if torchscript {
        Loader::TorchScript
    } else {
        Loader::Python
    };

    let found = add_pickle(&mut archive, parts, "data.pkl", "data", "", "", loader)?;
    if !found {
        let data_name = archive.full_name("data.pkl");
        return Err(archive.err("zip", format!("no {data_name}: not a PyTorch archive")));
    }
    if torchscript {
        // TorchScript keeps constant tensors apart, their records under `constants/`.
        add_pickle(
            &mut archive,
            parts,
            "constants.pkl",
            "",
            "constants/",
            "constants.",
            loader,
        )?;
        let names: Vec<String> = archive.entries.keys().cloned().collect();
        let prefix = archive.prefix.clone();
        let code = read_code(&prefix, names.iter().map(String::as_str), |name| {
            archive.read(name)
        })?;
        parts.torchscript = Some(code);
    }
    Ok(if torchscript {
        Format::Torchscript
    } else {
        Format::PytorchZip
    })
}

/// Runs one pickle member and adds its tensors, their records found under `folder`;
/// `false` when the archive has no such member.
fn add_pickle(
    archive: &mut Archive<'_>,
    parts: &mut Parts,
    name: &str,
    folder: &str,
    key_prefix: &str,
    name_prefix: &str,
    loader: Loader,
) -> Result<bool> {
    let budget = Budget::default();
    let Some(bytes) = archive.read(name)? else {
        return Ok(false);
    };
    let full_name = archive.full_name(name);
    let path = archive.buffer.source();
    let member = Member {
        path,
        name: &full_name,
        unpickled: unpickle(&bytes, path, &full_name, 0, loader, &budget)?,
        key_prefix,
        name_prefix,
    };
    add_member(member, &mut Records { archive, folder }, &budget, parts)?;
    Ok(true)
}

/// Storage records of one archive folder (`data/<key>`; TorchScript constants keep their
/// `constants/` in the key).
struct Records<'a, 'b> {
    archive: &'a mut Archive<'b>,
    folder: &'a str,
}

impl StorageSource for Records<'_, '_> {
    fn data_ptr(
        &mut self,
        record: &StorageRecord,
        dtype: DType,
        nbytes: u64,
    ) -> Result<Option<DataPtr>> {
        let name = if self.folder.is_empty() {
            record.key.clone()
        } else {
            format!("{}/{}", self.folder, record.key)
        };
        let full = self.archive.full_name(&name);
        let Some(entry) = self.archive.entries.get(&full) else {
            if record.location == "meta" {
                return Ok(None);
            }
            return Err(self.archive.err(&full, "storage record is missing"));
        };
        if entry.size != nbytes {
            return Err(self.archive.err(
                &full,
                format!(
                    "record holds {} bytes but the pickle describes {nbytes} ({} {dtype})",
                    entry.size, record.numel
                ),
            ));
        }
        if entry.stored && !self.archive.big_endian {
            let start = entry.data_start;
            self.archive.stored_slice(&full)?;
            let end = start.checked_add(nbytes).ok_or(Error::Overflow {
                what: "storage record end",
            })?;
            return DataPtr::host(Arc::clone(self.archive.buffer), start..end).map(Some);
        }
        let mut bytes = self.archive.read(&name)?.unwrap_or_default();
        if self.archive.big_endian {
            byteswap(&mut bytes, dtype);
        }
        Ok(Some(DataPtr::heap(self.archive.path(), bytes)))
    }
}
