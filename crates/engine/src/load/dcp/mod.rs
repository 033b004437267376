//! `torch.distributed.checkpoint` directories: a `.metadata` file (a plain pickle that locates
//! every item, [`metadata`]) beside `*.distcp` files holding the
//! items, each `torch.save`d to its own byte range (`_StorageInfo` offset and length), one
//! after another. The directory is one checkpoint; a `.distcp` file alone is refused.
//!
//! Each item's range is read by the PyTorch zip reader as a file of its own (a
//! [`HostBuffer::window`] of the mapped `.distcp` file, so storages still point into the file).
//! A tensor item is one chunk of a state-dict tensor: its `torch.save` holds exactly one
//! tensor, of the chunk's sizes and the metadata's dtype. A tensor saved whole is one chunk
//! named by its fully qualified name; the chunks of a tensor saved in several are named
//! `fqn@[offsets]`, and [`ChunkedTensor`] says how they tile it. Bytes items (any other
//! object, which `dcp.load` reads with `torch.load(weights_only=False)`) are read like any
//! `torch.save` file: their globals are judged (DTensor's classes, which `dcp.load`'s import
//! of `torch.distributed.tensor` registers as safe globals, resolved), their tensors named
//! under the fqn.

mod metadata;
use super::limits::{Meter, ReadLimits};
use super::table::{Accepts, DirReader, Row};
use super::torch::archive;
use super::{Scope, Sink};
use crate::error::{Error, ErrorKind, Result};
use crate::pickle::allowlist::DTENSOR_REGISTERS;
use crate::{files, ChunkedTensor, Format, HostBuffer, Tensor, TensorChunk};
use metadata::{ChunkMeta, Metadata, StorageInfo, TensorMeta};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file that locates every item.
const METADATA: &str = ".metadata";

/// The extension of the files that hold the items.
const EXTENSION: &str = "distcp";

/// Whether `bytes` holds, at `offset`, a safetensors header (its length, then a JSON object)
/// whose text names DCP's sharding metadata key, as `serialization_format=SAFETENSORS`
/// writes it (`filesystem._write_files_from_queue`, `CUSTOM_METADATA_KEY`).
fn starts_dcp_safetensors(file: &HostBuffer, offset: u64) -> bool {
    let Some(len) = file
        .range(offset..offset.saturating_add(8))
        .ok()
        .and_then(|b| b.try_into().ok())
    else {
        return false;
    };
    let len = u64::from_le_bytes(len);
    // Only the header is asked for (of a remote file, fetched), and only when it fits.
    let start = offset.saturating_add(8);
    let header = start
        .checked_add(len)
        .filter(|&end| end <= file.len())
        .and_then(|end| file.range(start..end).ok());
    const KEY: &[u8] = b"\"DCP_SHARDING_INFO\"";
    header.is_some_and(|h| h.first() == Some(&b'{') && h.windows(KEY.len()).any(|w| w == KEY))
}

/// The first and smallest step a zstd item's output grows by.
const ZSTD_STEP: usize = 64 << 10;

/// Whether `descriptor` names the transform torch 2.9.1's `ExtensionRegistry` undoes itself:
/// `ZStandard`, registered as `stream.zstd`, of major version 1 (`from_descriptor` splits the
/// name from the version at the first `/` and the major version at the first `.`).
fn is_zstd(descriptor: &str) -> bool {
    let (name, version) = descriptor.split_once('/').unwrap_or((descriptor, ""));
    name == "stream.zstd" && version.split('.').next() == Some("1")
}

/// The window a zstd frame's header asks the decoder for (RFC 8878 3.1.1.1.2), or `None`
/// when `frame` starts no frame header this can read.
fn zstd_window(frame: &[u8]) -> Option<u64> {
    let descriptor = *frame.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    if single_segment {
        // The window is the content, whose size the header states.
        return zstd::zstd_safe::get_frame_content_size(frame)
            .ok()
            .flatten();
    }
    let window = *frame.get(5)?;
    let log = 10 + u32::from(window >> 3);
    let base = 1u64.checked_shl(log)?;
    Some(base + (base / 8) * u64::from(window & 7))
}

/// Pairs of chunks compared for overlap in one checkpoint, all its tensors together, at most:
/// beyond it the checkpoint is refused rather than checked for longer than a read should take
/// (a per-tensor cap let many tensors of many chunks each run for minutes).
const MAX_CHUNK_PAIRS: u64 = 1 << 24;

/// `dcp.save`'s directories: `.metadata` and its `.distcp` files.
pub(crate) const ROW: Row = Row {
    what: "torch.distributed.checkpoint directory",
    loader: "dcp.load",
    extensions: &["distcp"],
    accepts: Accepts::Directory(DirReader {
        files: parts,
        is_part,
        read: read_into,
        part: "a .distcp file of a torch.distributed.checkpoint",
    }),
};

/// The files that make `dir` a torch.distributed.checkpoint directory, `.metadata` first and
/// then every `.distcp` file in name order; `None` when it is not one or cannot be listed.
pub(super) fn parts(dir: &Path) -> Option<Vec<PathBuf>> {
    let metadata = dir.join(METADATA);
    if !files::is_file(&metadata) {
        return None;
    }
    let mut parts: Vec<PathBuf> = files::list_dir(dir)?
        .into_iter()
        .filter(|p| is_part(p) && files::is_file(p))
        .collect();
    if parts.is_empty() {
        return None;
    }
    parts.sort();
    parts.insert(0, metadata);
    Some(parts)
}

/// Whether `path` names a `.distcp` file, which is never a checkpoint on its own.
pub(super) fn is_part(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == EXTENSION)
}

/// Reads the directory `dir` as one checkpoint through `sink`.
pub(super) fn read_into(dir: &Path, sink: &mut Sink<'_>) -> Result<Format> {
    let metadata_path = metadata::path_in(dir);
    let buffer = files::open(&metadata_path)?;
    let metadata = metadata::parse(
        buffer.bytes(),
        &metadata_path,
        &sink.meter().pickle_budget(),
    )?;
    // What the metadata holds is kept for the whole read: charged like any metadata.
    sink.meter()
        .hold(&metadata_path, metadata.held_bytes(), || {
            "the distributed checkpoint's metadata".to_owned()
        })?;
    let mut reading = Reading {
        dir,
        files: HashMap::new(),
    };
    let located = reading
        .tile_and_locate(&metadata, true)
        .map_err(|e| e.with_unsafe_globals(metadata.unsafe_globals.clone()))?;
    sink.add_unsafe_globals(metadata.unsafe_globals.iter().cloned());
    // A refusal from here on names every global read so far.
    let refused = |sink: &Sink<'_>, e: Error| e.with_unsafe_globals(sink.unsafe_globals().to_vec());
    for tensor in &metadata.tensors {
        match reading.read_tensor(tensor, &located, sink) {
            Ok(chunked) => sink.add_chunked(chunked),
            Err(e) => return Err(refused(sink, e)),
        }
    }
    let bytes_items = sink.global_mark();
    for fqn in &metadata.bytes {
        let item = located.get(&(fqn.as_str(), None)).copied();
        let item =
            item.ok_or_else(|| mismatch(dir, format!("no storage_data item for '{fqn}'")))?;
        // A tensor found in a bytes item is named under the item's fqn.
        let mut named = sink.nested(Scope::default().under(fqn.as_str()));
        if let Err(e) = reading.read_item(item, &mut named) {
            return Err(refused(sink, e));
        }
    }
    // `dcp.load` imports `torch.distributed.tensor`, which registers DTensor's classes as
    // safe globals: in its bytes items they are resolved as torch's own table is.
    sink.retain_unsafe_globals_since(bytes_items, |g| {
        !DTENSOR_REGISTERS.contains(&format!("{}.{}", g.module, g.name).as_str())
    });
    unique_names(dir, sink.tensors_since(0))
        .and_then(|()| every_byte_in_an_item(dir, &metadata.items, &reading.files))
        .map_err(|e| refused(sink, e))?;
    Ok(Format::Distributed)
}

/// Checks a `.metadata` alone as [`read_into`] does before reading any item: parsed within
/// `limits`, every tensor's chunks tiled, every item located. For a fuzzer.
pub(crate) fn check_metadata(bytes: &[u8], limits: ReadLimits) -> Result<usize> {
    let dir = Path::new("fuzz-input");
    let budget = Meter::new(limits).pickle_budget();
    let metadata = metadata::parse(bytes, &dir.join(METADATA), &budget)?;
    let mut reading = Reading {
        dir,
        files: HashMap::new(),
    };
    Ok(reading.tile_and_locate(&metadata, false)?.len())
}

/// No two tensors share a name: a bytes item's tensors are named under its fqn, which a
/// crafted metadata could make another tensor's name.
fn unique_names(dir: &Path, tensors: &[Tensor]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(tensors.len());
    match tensors.iter().find(|t| !seen.insert(t.name())) {
        Some(t) => Err(mismatch(
            dir,
            format!("two items give a tensor the name '{}'", t.name()),
        )),
        None => Ok(()),
    }
}

/// Items by `MetadataIndex` (fqn, and offsets for a tensor chunk).
type Located<'a> = HashMap<(&'a str, Option<&'a [u64]>), &'a StorageInfo>;

struct Reading<'a> {
    dir: &'a Path,
    /// Each `.distcp` file mapped once, by its name in the metadata.
    files: HashMap<String, Arc<HostBuffer>>,
}

impl<'a> Reading<'a> {
    /// What is checked before any item is read: every tensor's chunks tile it (the pairs
    /// compared bounded per checkpoint), the files are not DCP's safetensors layout (looked at
    /// when `files`), and every item is located.
    fn tile_and_locate<'m>(&mut self, metadata: &'m Metadata, files: bool) -> Result<Located<'m>> {
        let mut pairs_left = MAX_CHUNK_PAIRS;
        for tensor in &metadata.tensors {
            check_tiling(self.dir, tensor, &mut pairs_left)?;
        }
        if files {
            self.not_safetensors(metadata)?;
        }
        self.locate(metadata)
    }

    /// Refuses a checkpoint written with `serialization_format=SAFETENSORS`. That writer puts
    /// a file's bytes items first, then every tensor of the file as one safetensors file
    /// appended after them, its `__metadata__` holding DCP's `DCP_SHARDING_INFO`; each tensor
    /// item's `_StorageInfo` has the offset where that safetensors file starts and the length
    /// of the tensor's raw bytes. `dcp.load` (`FileSystemReader.read_data`) reads each item's
    /// range as a `torch.save` record and fails on the first, so no reading is right here:
    /// it is named for what it is rather than reported as items that share bytes.
    fn not_safetensors(&mut self, metadata: &Metadata) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for item in metadata.items.iter().filter(|i| i.offset_key.is_some()) {
            if !seen.insert((item.relative_path.as_str(), item.offset)) {
                continue;
            }
            let Ok(file) = self.file(&item.relative_path) else {
                continue;
            };
            if starts_dcp_safetensors(&file, item.offset) {
                return Err(Error::UnsupportedFormat {
                    path: self.dir.to_owned(),
                    format: "torch.distributed.checkpoint written with \
                             serialization_format=SAFETENSORS (each .distcp file's tensors \
                             are one safetensors file after its bytes items, which dcp.load's \
                             FileSystemReader in torch 2.9.1 does not read back either)",
                });
            }
        }
        Ok(())
    }

    /// Every item by its index, each named by exactly one tensor chunk or bytes entry: an
    /// item nothing names would never be loaded, and is not left unread.
    fn locate<'m>(&self, metadata: &'m Metadata) -> Result<Located<'m>> {
        let mut located: Located<'m> = HashMap::with_capacity(metadata.items.len());
        for item in &metadata.items {
            let key = (item.fqn.as_str(), item.offset_key.as_deref());
            if located.insert(key, item).is_some() {
                return Err(mismatch(
                    self.dir,
                    format!("{} is stored twice", describe(item)),
                ));
            }
        }
        no_shared_bytes(self.dir, &metadata.items)?;
        // Every key the state dict names, in one set: finding an item none names is one pass.
        let mut named = std::collections::HashSet::with_capacity(located.len());
        for tensor in &metadata.tensors {
            for chunk in &tensor.chunks {
                let key = (tensor.fqn.as_str(), Some(chunk.offsets.as_slice()));
                if !located.contains_key(&key) {
                    return Err(mismatch(
                        self.dir,
                        format!(
                            "no storage_data item for chunk {:?} of '{}'",
                            chunk.offsets, tensor.fqn
                        ),
                    ));
                }
                named.insert(key);
            }
        }
        for fqn in &metadata.bytes {
            let key = (fqn.as_str(), None);
            if !located.contains_key(&key) {
                return Err(mismatch(
                    self.dir,
                    format!("no storage_data item for '{fqn}'"),
                ));
            }
            named.insert(key);
        }
        if named.len() != located.len() {
            let unnamed = metadata
                .items
                .iter()
                .find(|item| !named.contains(&(item.fqn.as_str(), item.offset_key.as_deref())));
            let what = unnamed.map_or_else(|| "an item".to_owned(), describe);
            return Err(mismatch(
                self.dir,
                format!("{what} is named by no tensor chunk or bytes entry of state_dict_metadata"),
            ));
        }
        Ok(located)
    }

    fn read_tensor(
        &mut self,
        tensor: &TensorMeta,
        located: &Located<'_>,
        sink: &mut Sink<'_>,
    ) -> Result<ChunkedTensor> {
        let whole = tensor.chunks.len() == 1;
        let mut chunks = Vec::with_capacity(tensor.chunks.len());
        for chunk in &tensor.chunks {
            let key = (tensor.fqn.as_str(), Some(chunk.offsets.as_slice()));
            let Some(item) = located.get(&key).copied() else {
                return Err(mismatch(self.dir, format!("no item for '{}'", tensor.fqn)));
            };
            let name = match whole {
                true => tensor.fqn.clone(),
                false => format!("{}@{:?}", tensor.fqn, chunk.offsets),
            };
            let first = sink.tensor_mark();
            self.read_item(
                item,
                &mut sink.nested(Scope::default().under(name.as_str())),
            )?;
            let index = self.check_chunk(tensor, chunk, item, sink.tensors_since(first), &name)?;
            let index = first + index;
            chunks.push(TensorChunk {
                offsets: chunk.offsets.clone(),
                sizes: chunk.sizes.clone(),
                tensor: index,
            });
        }
        Ok(ChunkedTensor {
            name: tensor.fqn.clone(),
            dtype: tensor.dtype,
            shape: tensor.size.clone(),
            chunks,
        })
    }

    /// The chunk's record (`saved`, its tensors named under `name`) holds one tensor, the
    /// tensor saved itself, of the chunk's sizes and the metadata's dtype; returns its index
    /// in `saved`.
    fn check_chunk(
        &self,
        tensor: &TensorMeta,
        chunk: &ChunkMeta,
        item: &StorageInfo,
        saved: &[Tensor],
        name: &str,
    ) -> Result<usize> {
        let [one] = saved else {
            return Err(mismatch(
                self.dir,
                format!(
                    "{} holds {} tensors, not one chunk",
                    describe(item),
                    saved.len()
                ),
            ));
        };
        let imp = one.tensor_impl();
        let sizes = imp.layout().sizes();
        if one.name() != name {
            let saved_as = one
                .name()
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('.'))
                .unwrap_or(one.name());
            return Err(mismatch(
                self.dir,
                format!(
                    "{} is not a saved tensor but holds one as '{saved_as}'",
                    describe(item),
                ),
            ));
        }
        if sizes != chunk.sizes.as_slice() {
            return Err(mismatch(
                self.dir,
                format!(
                    "{} holds a tensor of shape {sizes:?}, but the metadata says {:?}",
                    describe(item),
                    chunk.sizes
                ),
            ));
        }
        if imp.dtype() != tensor.dtype {
            return Err(mismatch(
                self.dir,
                format!(
                    "{} holds {}, but the metadata says {}",
                    describe(item),
                    imp.dtype(),
                    tensor.dtype
                ),
            ));
        }
        Ok(0)
    }

    /// Reads one item's `torch.save` record through `sink`. Its globals are reported under
    /// the file and range they were read from. An item written through a storage transform
    /// (`FileSystemWriter(_extensions=[ZStandard()])`) is the record compressed: it is read as
    /// `dcp.load` reads it, from the bytes the transforms give back.
    fn read_item(&mut self, item: &StorageInfo, sink: &mut Sink<'_>) -> Result<()> {
        let file = self.file(&item.relative_path)?;
        let end = item
            .offset
            .checked_add(item.length)
            .ok_or(Error::Overflow {
                what: "distributed checkpoint item end",
            })?;
        let window = HostBuffer::window(&file, item.offset..end).ok_or_else(|| {
            mismatch(
                self.dir,
                format!(
                    "{} lies outside its file ({} bytes)",
                    describe(item),
                    file.len()
                ),
            )
        })?;
        let record = format!("{}[{}..{end}]", item.relative_path, item.offset);
        let window = match item.transforms.is_empty() {
            true => window,
            false => self.untransform(item, &window, &record, sink.meter())?,
        };
        let mut sink = sink.nested(Scope::default().member(record));
        let format = archive::read_into(&window, &mut sink).map_err(|source| Error::Shard {
            path: self.dir.to_owned(),
            source: Box::new(source),
        })?;
        if format != Format::PytorchZip {
            return Err(mismatch(
                self.dir,
                format!("{} is not a torch.save record", describe(item)),
            ));
        }
        Ok(())
    }

    /// The bytes `dcp.load` reads from `item` (`FileSystemReader.read_data`): its range with
    /// each storage transform undone in the order `transform_descriptors` lists them. Only the
    /// transform torch 2.9.1 ships is known (`ZStandard`, `stream.zstd/1`); `dcp.load` refuses
    /// any other it has not been given, and so does this.
    fn untransform(
        &self,
        item: &StorageInfo,
        window: &Arc<HostBuffer>,
        record: &str,
        meter: &Meter,
    ) -> Result<Arc<HostBuffer>> {
        let source = self.dir.join(record);
        let mut bytes: Option<Vec<u8>> = None;
        for descriptor in &item.transforms {
            if !is_zstd(descriptor) {
                return Err(Error::Malformed {
                    path: self.dir.to_owned(),
                    part: record.to_owned(),
                    detail: format!(
                        "{} is written through the storage transform '{descriptor}', which \
                         dcp.load does not undo without its extension (torch 2.9.1 ships \
                         only stream.zstd/1)",
                        describe(item)
                    ),
                });
            }
            let input = bytes.as_deref().unwrap_or(window.bytes());
            bytes = Some(self.unzstd(item, input, record, meter)?);
        }
        Ok(match bytes {
            Some(bytes) => HostBuffer::from_vec(source, bytes),
            None => Arc::clone(window),
        })
    }

    /// One zstd frame, decompressed within `meter`: the frame's window and its output are
    /// checked against the budget before they are allocated, and the output is held for the
    /// rest of the read (the record's storages point into it). `ZStandard` writes through a
    /// stream, so its frames do not state their size: the output is checked as it grows. The
    /// frame must fill the item: `dcp.load` reads one frame (zstandard's `stream_reader`
    /// stops at its end), so bytes after it would be audited by nothing.
    fn unzstd(
        &self,
        item: &StorageInfo,
        compressed: &[u8],
        record: &str,
        meter: &Meter,
    ) -> Result<Vec<u8>> {
        use std::io::Read;
        let corrupt = |detail: String| Error::Malformed {
            path: self.dir.to_owned(),
            part: record.to_owned(),
            detail,
        };
        let frame = zstd::zstd_safe::find_frame_compressed_size(compressed).map_err(|code| {
            corrupt(format!(
                "not a zstd frame ({})",
                zstd::zstd_safe::get_error_name(code)
            ))
        })?;
        if frame != compressed.len() {
            return Err(mismatch(
                self.dir,
                format!(
                    "{} holds {} bytes after its zstd frame: dcp.load never reads them, so \
                     they are not audited as part of this checkpoint",
                    describe(item),
                    compressed.len() - frame
                ),
            ));
        }
        let what = || format!("{} decompressed", describe(item));
        let path = self.dir.join(record);
        let declared = zstd::zstd_safe::get_frame_content_size(compressed)
            .ok()
            .flatten();
        // What the decoder allocates for the frame's window, then what the frame declares.
        let window = zstd_window(compressed).unwrap_or(0);
        meter.check(&path, window, what)?;
        if let Some(size) = declared {
            meter.check(&path, size.saturating_add(window), what)?;
        }
        let mut decoder = zstd::stream::read::Decoder::with_buffer(compressed)
            .map_err(|e| corrupt(format!("zstd: {e}")))?
            .single_frame();
        let mut out: Vec<u8> = Vec::new();
        loop {
            let len = out.len();
            let step = len.clamp(ZSTD_STEP, ZSTD_STEP * 64);
            // The output beside the decoder's window, grown by exactly what is checked.
            let grown = (len as u64).saturating_add(step as u64);
            meter.check(&path, grown.saturating_add(window), what)?;
            out.reserve_exact(step);
            out.resize(len + step, 0);
            let read = decoder.read(&mut out[len..]);
            let n = read.map_err(|e| corrupt(format!("zstd: {e}")))?;
            out.truncate(len + n);
            if n == 0 {
                break;
            }
        }
        out.shrink_to_fit();
        meter.hold(&path, out.len() as u64, what)?;
        Ok(out)
    }

    /// The `.distcp` file `name` (a plain file name beside `.metadata`), mapped once.
    fn file(&mut self, name: &str) -> Result<Arc<HostBuffer>> {
        if let Some(buffer) = self.files.get(name) {
            return Ok(Arc::clone(buffer));
        }
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\'])
            && name != METADATA;
        if !plain {
            return Err(mismatch(
                self.dir,
                format!("item file '{name}' is not a plain file name beside .metadata"),
            ));
        }
        let path = self.dir.join(name);
        // A file the metadata names and the directory lacks is a disagreement between them.
        let buffer = files::open(&path).map_err(|source| match source.kind() {
            ErrorKind::Unopenable => mismatch(self.dir, format!("item file {source}")),
            _ => Error::Shard {
                path: self.dir.to_owned(),
                source: Box::new(source),
            },
        })?;
        self.files.insert(name.to_owned(), Arc::clone(&buffer));
        Ok(buffer)
    }
}

/// Every byte of every `.distcp` file beside `.metadata`, and of every file an item names,
/// lies in an item. `dcp.load` opens only the files items name and reads only their ranges
/// (`FileSystemReader.read_data`), and DCP's writer puts a file's items back to back from its
/// first byte (`_write_item`: `offset = stream.tell()`). So a file no item names, or bytes
/// between or after the items (a second record appended, say), are read by no load and would
/// be seen by no audit: refused, named. An empty file (a writer thread given no items) holds
/// nothing to read. Checked last, so a damaged item is reported as such first.
fn every_byte_in_an_item(
    dir: &Path,
    items: &[StorageInfo],
    mapped: &HashMap<String, Arc<HostBuffer>>,
) -> Result<()> {
    let ranges = sorted_ranges(items);
    // Bytes before, between and after a file's ranges (which no_shared_bytes keeps apart).
    let mut next = 0usize;
    while let Some(&(file, _, _, _)) = ranges.get(next) {
        let len = mapped.get(file).map_or(0, |b| b.len());
        let mut covered = 0u64;
        while let Some(&(_, start, end, _)) = ranges.get(next).filter(|r| r.0 == file) {
            if start > covered {
                return Err(unread(dir, file, covered, start));
            }
            covered = covered.max(end);
            next += 1;
        }
        if covered < len {
            return Err(unread(dir, file, covered, len));
        }
    }
    for part in parts(dir).unwrap_or_default().iter().skip(1) {
        let named = part
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| mapped.contains_key(n));
        let len = files::len(part).unwrap_or(0);
        if !named && len > 0 {
            let name = part.file_name().unwrap_or_default().to_string_lossy();
            return Err(mismatch(
                dir,
                format!(
                    "{name} ({len} bytes) is named by no item: dcp.load never reads it, \
                     so it is not audited as part of this checkpoint"
                ),
            ));
        }
    }
    Ok(())
}

fn unread(dir: &Path, file: &str, start: u64, end: u64) -> Error {
    mismatch(
        dir,
        format!(
            "bytes {start}..{end} of {file} lie in no item: dcp.load never reads them, \
             so they are not audited as part of this checkpoint"
        ),
    )
}

/// Each item's file and byte range, sorted by file, then start, then end.
fn sorted_ranges(items: &[StorageInfo]) -> Vec<(&str, u64, u64, &StorageInfo)> {
    let mut ranges: Vec<(&str, u64, u64, &StorageInfo)> = items
        .iter()
        .map(|i| {
            (
                i.relative_path.as_str(),
                i.offset,
                i.offset.saturating_add(i.length),
                i,
            )
        })
        .collect();
    ranges.sort_by_key(|&(file, start, end, _)| (file, start, end));
    ranges
}

/// No two items share bytes of a file: DCP writes them one after another, so items that
/// overlap come from a metadata that does not describe the files.
fn no_shared_bytes(dir: &Path, items: &[StorageInfo]) -> Result<()> {
    let ranges = sorted_ranges(items);
    for pair in ranges.windows(2) {
        if let [(file, _, end, a), (next_file, start, _, b)] = pair {
            if file == next_file && start < end {
                return Err(mismatch(
                    dir,
                    format!("{} and {} share bytes", describe(a), describe(b)),
                ));
            }
        }
    }
    Ok(())
}

/// The chunks of `tensor` tile its size: each lies inside it, no two overlap, and together
/// they hold as many elements as it does (so none is left uncovered). Its pairs of chunks
/// are taken from `pairs_left`, the checkpoint's budget of comparisons.
fn check_tiling(dir: &Path, tensor: &TensorMeta, pairs_left: &mut u64) -> Result<()> {
    let fqn = &tensor.fqn;
    let volume = |sizes: &[u64]| {
        sizes
            .iter()
            .try_fold(1u64, |acc, &s| acc.checked_mul(s))
            .ok_or(Error::Overflow {
                what: "distributed checkpoint tensor size",
            })
    };
    if tensor.chunks.is_empty() {
        return Err(mismatch(dir, format!("'{fqn}' has no chunks")));
    }
    let mut covered = 0u64;
    for chunk in &tensor.chunks {
        let rank = tensor.size.len();
        if chunk.offsets.len() != rank || chunk.sizes.len() != rank {
            return Err(mismatch(
                dir,
                format!(
                    "chunk {:?} of '{fqn}' has a rank other than the tensor's {:?}",
                    chunk.offsets, tensor.size
                ),
            ));
        }
        let inside = chunk
            .offsets
            .iter()
            .zip(&chunk.sizes)
            .zip(&tensor.size)
            .all(|((&o, &s), &size)| o.checked_add(s).is_some_and(|end| end <= size));
        if !inside {
            return Err(mismatch(
                dir,
                format!(
                    "chunk {:?} of sizes {:?} reaches past '{fqn}' of size {:?}",
                    chunk.offsets, chunk.sizes, tensor.size
                ),
            ));
        }
        covered = covered
            .checked_add(volume(&chunk.sizes)?)
            .ok_or(Error::Overflow {
                what: "distributed checkpoint tensor size",
            })?;
    }
    let n = tensor.chunks.len() as u64;
    let pairs = n.saturating_mul(n.saturating_sub(1)) / 2;
    *pairs_left = pairs_left
        .checked_sub(pairs)
        .ok_or_else(|| Error::UnsupportedFormat {
            path: dir.to_owned(),
            format: "torch.distributed.checkpoint with more pairs of chunks than 16777216 to check for overlap",
        })?;
    for (i, a) in tensor.chunks.iter().enumerate() {
        for b in tensor.chunks.iter().skip(i + 1) {
            if overlap(a, b) {
                return Err(mismatch(
                    dir,
                    format!(
                        "chunks {:?} and {:?} of '{fqn}' overlap",
                        a.offsets, b.offsets
                    ),
                ));
            }
        }
    }
    let numel = volume(&tensor.size)?;
    if covered != numel {
        return Err(mismatch(
            dir,
            format!("the chunks of '{fqn}' cover {covered} of its {numel} elements"),
        ));
    }
    Ok(())
}

/// Whether two boxes of one rank share an element (a box with an empty side holds none).
fn overlap(a: &ChunkMeta, b: &ChunkMeta) -> bool {
    let ends = |c: &ChunkMeta, d: usize| {
        let start = c.offsets.get(d).copied().unwrap_or(0);
        (
            start,
            start.saturating_add(c.sizes.get(d).copied().unwrap_or(0)),
        )
    };
    (0..a.offsets.len()).all(|d| {
        let ((a0, a1), (b0, b1)) = (ends(a, d), ends(b, d));
        a0 < b1 && b0 < a1
    })
}

fn describe(item: &StorageInfo) -> String {
    let what = match &item.offset_key {
        Some(offsets) => format!("chunk {offsets:?} of '{}'", item.fqn),
        None => format!("'{}'", item.fqn),
    };
    format!(
        "{what} ({} bytes {}..{})",
        item.relative_path,
        item.offset,
        item.offset.saturating_add(item.length)
    )
}

fn mismatch(dir: &Path, detail: String) -> Error {
    Error::DistributedMismatch {
        path: dir.to_owned(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    fn tensor(size: &[u64], chunks: &[(&[u64], &[u64])]) -> TensorMeta {
        TensorMeta {
            fqn: "w".into(),
            dtype: DType::Float32,
            size: size.to_vec(),
            chunks: chunks
                .iter()
                .map(|(o, s)| ChunkMeta {
                    offsets: o.to_vec(),
                    sizes: s.to_vec(),
                })
                .collect(),
        }
    }

    /// The comparisons are the checkpoint's, not each tensor's: tensors each well under the
    /// budget are refused together once they pass it.
    #[test]
    fn the_pairs_checked_are_counted_across_tensors() {
        let halves: &[(&[u64], &[u64])] = &[(&[0], &[1]), (&[1], &[1]), (&[2], &[1])];
        let three = tensor(&[3], halves); // three chunks: three pairs
        let mut left = 7;
        assert!(check_tiling(Path::new("d"), &three, &mut left).is_ok());
        assert!(check_tiling(Path::new("d"), &three, &mut left).is_ok());
        assert_eq!(left, 1);
        let refused = check_tiling(Path::new("d"), &three, &mut left).unwrap_err();
        assert!(refused.to_string().contains("pairs of chunks"), "{refused}");
    }

    fn tiling(size: &[u64], chunks: &[(&[u64], &[u64])]) -> std::result::Result<(), String> {
        check_tiling(Path::new("d"), &tensor(size, chunks), &mut {
            MAX_CHUNK_PAIRS
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn chunks_must_tile_their_tensor() {
        assert_eq!(
            tiling(&[4, 2], &[(&[0, 0], &[2, 2]), (&[2, 0], &[2, 2])]),
            Ok(())
        );
        assert_eq!(tiling(&[], &[(&[], &[])]), Ok(()));
        // Columns, too.
        assert_eq!(
            tiling(&[2, 4], &[(&[0, 2], &[2, 2]), (&[0, 0], &[2, 2])]),
            Ok(())
        );
        let gap = tiling(&[4, 2], &[(&[0, 0], &[2, 2]), (&[3, 0], &[1, 2])]).unwrap_err();
        assert!(gap.contains("cover 6 of its 8 elements"), "{gap}");
        let overlap = tiling(&[4, 2], &[(&[0, 0], &[3, 2]), (&[2, 0], &[2, 2])]).unwrap_err();
        assert!(overlap.contains("overlap"), "{overlap}");
        let past = tiling(&[4, 2], &[(&[0, 0], &[5, 2])]).unwrap_err();
        assert!(past.contains("reaches past"), "{past}");
        let rank = tiling(&[4, 2], &[(&[0], &[4])]).unwrap_err();
        assert!(rank.contains("rank"), "{rank}");
        let huge = tiling(&[u64::MAX], &[(&[u64::MAX], &[2])]).unwrap_err();
        assert!(huge.contains("reaches past"), "{huge}");
        assert!(tiling(&[1], &[]).unwrap_err().contains("no chunks"));
        // Two scalar chunks are the same element.
        let twice = tiling(&[], &[(&[], &[]), (&[], &[])]).unwrap_err();
        assert!(
            twice.contains("overlap") || twice.contains("twice"),
            "{twice}"
        );
    }

    #[test]
    fn every_byte_of_every_distcp_file_lies_in_an_item() {
        let dir = std::env::temp_dir().join(format!("tensorplay-dcp-cover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(METADATA), b"").unwrap();
        std::fs::write(dir.join("a.distcp"), [0u8; 10]).unwrap();
        let mut mapped = HashMap::new();
        mapped.insert(
            "a.distcp".to_owned(),
            HostBuffer::map_file(&dir.join("a.distcp")).unwrap(),
        );
        let item = |offset, length| StorageInfo {
            fqn: "w".into(),
            offset_key: None,
            relative_path: "a.distcp".into(),
            offset,
            length,
            transforms: Vec::new(),
        };
        let check = |items: &[StorageInfo]| {
            every_byte_in_an_item(&dir, items, &mapped).map_err(|e| e.to_string())
        };
        assert_eq!(check(&[item(4, 6), item(0, 4)]), Ok(()));
        let gap = check(&[item(0, 4), item(5, 5)]).unwrap_err();
        assert!(
            gap.contains("bytes 4..5 of a.distcp lie in no item"),
            "{gap}"
        );
        let head = check(&[item(2, 8)]).unwrap_err();
        assert!(head.contains("bytes 0..2 of a.distcp"), "{head}");
        let tail = check(&[item(0, 4)]).unwrap_err();
        assert!(tail.contains("bytes 4..10 of a.distcp"), "{tail}");
        // A file no item names: empty, it holds nothing; otherwise it is named.
        std::fs::write(dir.join("b.distcp"), b"").unwrap();
        assert_eq!(check(&[item(0, 10)]), Ok(()));
        std::fs::write(dir.join("b.distcp"), b"abc").unwrap();
        let unnamed = check(&[item(0, 10)]).unwrap_err();
        assert!(
            unnamed.contains("b.distcp (3 bytes) is named by no item"),
            "{unnamed}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn only_zstd_of_major_version_1_is_undone() {
        assert!(is_zstd("stream.zstd/1"));
        assert!(is_zstd("stream.zstd/1.2"));
        assert!(!is_zstd("stream.zstd"));
        assert!(!is_zstd("stream.zstd/2"));
        assert!(!is_zstd("stream.zstd/1/2"));
        assert!(!is_zstd("stream.lz4/1"));
    }

    fn zstd_item(length: u64) -> StorageInfo {
        StorageInfo {
            fqn: "w".into(),
            offset_key: None,
            relative_path: "a.distcp".into(),
            offset: 0,
            length,
            transforms: vec!["stream.zstd/1".into()],
        }
    }

    /// A frame is decompressed within the budget, fills its item, and is held once read.
    #[test]
    fn a_zstd_item_is_bounded_by_the_meter_and_fills_its_range() {
        let dir = Path::new("d");
        let reading = Reading {
            dir,
            files: HashMap::new(),
        };
        let data = vec![7u8; 4_000_000];
        let frame = zstd::stream::encode_all(&data[..], 3).unwrap();
        assert!(zstd_window(&frame).is_some());
        let limits = |max_memory| ReadLimits {
            max_memory,
            ..ReadLimits::default()
        };
        let item = zstd_item(frame.len() as u64);
        let meter = Meter::new(limits(16 << 20));
        let out = reading
            .unzstd(&item, &frame, "a.distcp[0..]", &meter)
            .unwrap();
        assert_eq!(out, data);
        assert_eq!(meter.held(), data.len() as u64);
        // Under a budget that fits its window (2 MiB at level 3) but not its output: refused
        // before the output is all allocated.
        assert_eq!(zstd_window(&frame), Some(2 << 20));
        let small = Meter::new(limits(3 << 20));
        let refused = reading
            .unzstd(&item, &frame, "a.distcp[0..]", &small)
            .unwrap_err();
        assert!(matches!(refused, Error::MemoryBudget { .. }), "{refused}");
        assert_eq!(small.held(), 0);
        // Bytes after the frame are read by no load.
        let mut longer = frame.clone();
        longer.extend_from_slice(b"xyz");
        let trailing = reading
            .unzstd(
                &zstd_item(longer.len() as u64),
                &longer,
                "a.distcp[0..]",
                &meter,
            )
            .unwrap_err()
            .to_string();
        assert!(
            trailing.contains("3 bytes after its zstd frame"),
            "{trailing}"
        );
        let not_zstd = reading
            .unzstd(&item, b"PK\x03\x04 not zstd", "a.distcp[0..]", &meter)
            .unwrap_err()
            .to_string();
        assert!(not_zstd.contains("not a zstd frame"), "{not_zstd}");
    }

    #[test]
    fn a_dcp_safetensors_header_is_recognised_where_an_item_starts() {
        let header = br#"{"__metadata__":{"DCP_SHARDING_INFO":"{}","format":"pt"}}"#;
        let mut bytes = b"pickled bytes item".to_vec();
        let at = bytes.len() as u64;
        bytes.extend_from_slice(&(header.len() as u64).to_le_bytes());
        bytes.extend_from_slice(header);
        let file = |bytes: &[u8]| HostBuffer::from_vec("a.distcp", bytes.to_vec());
        assert!(starts_dcp_safetensors(&file(&bytes), at));
        assert!(!starts_dcp_safetensors(&file(&bytes), 0));
        assert!(!starts_dcp_safetensors(&file(&bytes), at + 1));
        assert!(!starts_dcp_safetensors(&file(&bytes), u64::MAX));
        // A header that runs past the file is none.
        assert!(!starts_dcp_safetensors(
            &file(&bytes[..bytes.len() - 1]),
            at
        ));
    }

    #[test]
    fn a_distcp_file_is_a_part_and_a_plain_directory_is_no_checkpoint() {
        assert!(is_part(Path::new("x/__0_0.distcp")));
        assert!(!is_part(Path::new("x/model.pt")));
        assert!(parts(Path::new("/")).is_none());
    }
}
