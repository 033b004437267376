//! The engine's one error type. Every variant that comes from a file names the file
//! and the part of it that is wrong, so the CLI can print it on one line as it is.

use crate::units::bytes_exactly;
use crate::unsafe_global::UnsafeGlobal;
use std::borrow::Cow;
use std::path::PathBuf;

/// Everything that can go wrong while reading a checkpoint or building its model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened, measured or mapped.
    #[error("{}: cannot read: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },

    /// A remote object could not be read: the store was unreachable or refused (after bounded
    /// retries). Nothing can be said about the checkpoint.
    #[error("{}: cannot read: {detail}", .path.display())]
    Remote {
        /// The object, as its path was given.
        path: PathBuf,
        /// What the store or the transport said.
        detail: String,
    },

    /// A remote object answered with bytes that cannot be its own: it changed between reads,
    /// or a range request was answered with other bytes.
    #[error("{}: the remote object is not what was read before: {detail}", .path.display())]
    RemoteInconsistent {
        /// The object.
        path: PathBuf,
        /// What disagreed.
        detail: String,
    },

    /// Reading a remote object would fetch more than the run allows (`--max-remote-bytes`,
    /// `--max-requests`) or go on past its deadline (`--remote-deadline`): refused unjudged,
    /// which says nothing of the object.
    #[error("{}: exceeds the remote read budget ({}): {}", .path.display(), .bound.flag(), remote_over(*.bound, *.needed, *.limit))]
    RemoteBudget {
        /// The object.
        path: PathBuf,
        /// Which bound was passed.
        bound: RemoteBound,
        /// What the run would have taken of it with this request: bytes fetched, or requests
        /// made, by every remote read of the run; for the deadline, the seconds it has taken.
        needed: u64,
        /// The bound's value (seconds, for the deadline).
        limit: u64,
    },

    /// The file has no bytes at all.
    #[error("{}: empty file", .path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },

    /// The first bytes match no format tensorplay reads.
    #[error("{}: not a checkpoint tensorplay can read (first bytes: {first_bytes})", .path.display())]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// Up to 16 leading bytes, in hex.
        first_bytes: String,
    },

    /// The format was recognised but tensorplay has no reader for it yet.
    #[error("{}: {format} files are recognised but not readable yet", .path.display())]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The recognised format's name.
        format: &'static str,
    },

    /// The file was not judged within the run's time limit for one file (`--timeout-per-file`):
    /// refused unjudged, which says nothing of the file.
    #[error("{}: exceeds the time limit per file (--timeout-per-file): not judged within the {seconds} s allowed; its reading was abandoned", .path.display())]
    TimeLimit {
        /// The file.
        path: PathBuf,
        /// The limit.
        seconds: u64,
    },

    /// tensorplay itself failed on this file (a bug): reported, never a pass.
    #[error("{}: internal error: {detail}", .path.display())]
    Internal {
        /// The file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },

    /// The safetensors length prefix is missing.
    #[error("{}: header: file is {len} bytes, too short for the 8-byte header length", .path.display())]
    HeaderTooSmall {
        /// The file.
        path: PathBuf,
        /// The file's length.
        len: u64,
    },

    /// The safetensors header length is above the format's cap.
    #[error("{}: header: declared length {declared} bytes exceeds the {max}-byte limit", .path.display())]
    HeaderTooLarge {
        /// The file.
        path: PathBuf,
        /// The declared header length.
        declared: u64,
        /// The cap.
        max: u64,
    },

    /// The safetensors header would end past the end of the file.
    #[error("{}: header: declared length {declared} bytes runs past the end of the {file_len}-byte file", .path.display())]
    HeaderBeyondFile {
        /// The file.
        path: PathBuf,
        /// The declared header length.
        declared: u64,
        /// The file's length.
        file_len: u64,
    },

    /// The header is not UTF-8.
    #[error("{}: header: invalid UTF-8 at header byte {position}", .path.display())]
    HeaderNotUtf8 {
        /// The file.
        path: PathBuf,
        /// Offset of the first bad byte inside the header.
        position: u64,
    },

    /// The header is not well-formed JSON, or not the object the format prescribes.
    #[error("{}: header: {detail}", .path.display())]
    HeaderSyntax {
        /// The file.
        path: PathBuf,
        /// What the parser found, with line and column.
        detail: String,
    },

    /// Two header entries or index entries carry the same tensor name.
    #[error("{}: header: tensor '{name}' is declared more than once", .path.display())]
    DuplicateTensor {
        /// The file.
        path: PathBuf,
        /// The repeated name.
        name: String,
    },

    /// A header entry is well-formed JSON but describes an impossible tensor.
    #[error("{}: tensor '{tensor}': {detail}", .path.display())]
    InvalidTensor {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        detail: String,
    },

    /// The tensor data region does not end where the file ends.
    #[error("{}: data: tensors end at byte {data_end} but the file has {file_len} bytes ({})", .path.display(), data_length_problem(*.data_end, *.file_len))]
    DataLength {
        /// The file.
        path: PathBuf,
        /// Absolute file offset where the declared tensor data ends.
        data_end: u64,
        /// The file's length.
        file_len: u64,
    },

    /// The safetensors crate rejected a header tensorplay's own checks let through.
    #[error("{}: header: rejected by the safetensors format rules ({detail})", .path.display())]
    SafetensorsRejected {
        /// The file.
        path: PathBuf,
        /// The crate's error.
        detail: String,
    },

    /// A sharded index file is not the JSON object the format prescribes.
    #[error("{}: index: {detail}", .path.display())]
    IndexSyntax {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },

    /// A shard of an index could not be read.
    #[error("{}: shard {source}", .path.display())]
    Shard {
        /// The index file.
        path: PathBuf,
        /// The shard's own error, which names the shard.
        source: Box<Error>,
    },

    /// A sharded index names a shard in a way tensorplay refuses to follow.
    #[error("{}: weight_map: shard path '{shard}' must be a plain file name beside the index", .path.display())]
    IndexShardPath {
        /// The index file.
        path: PathBuf,
        /// The shard name as written.
        shard: String,
    },

    /// A sharded index lists no tensors.
    #[error("{}: weight_map: the index lists no tensors", .path.display())]
    IndexEmpty {
        /// The index file.
        path: PathBuf,
    },

    /// The index maps a tensor to a shard that does not hold it.
    #[error("{}: weight_map: tensor '{tensor}' is mapped to '{shard}' but that shard does not hold it", .path.display())]
    IndexTensorAbsent {
        /// The index file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The shard the index names.
        shard: String,
    },

    /// One tensor name is held by two shards.
    #[error("{}: shards: tensor '{tensor}' is held by both '{first}' and '{second}'", .path.display())]
    IndexTensorInTwoShards {
        /// The index file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// One shard holding it.
        first: String,
        /// Another shard holding it.
        second: String,
    },

    /// A shard holds a tensor the index does not list.
    #[error("{}: weight_map: shard '{shard}' holds tensor '{tensor}', which the index does not list", .path.display())]
    IndexUnlistedTensor {
        /// The index file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The shard holding it.
        shard: String,
    },

    /// Shards of one index are of different formats.
    #[error("{}: shards: '{shard}' is {found}, but the set is {expected}", .path.display())]
    IndexMixedFormats {
        /// The index file.
        path: PathBuf,
        /// The odd shard.
        shard: String,
        /// Its format.
        found: &'static str,
        /// The format of the first shard.
        expected: &'static str,
    },

    /// A pickle stream is malformed or builds something impossible.
    #[error("{}: {member} at byte {position}: {detail}", .path.display())]
    Pickle {
        /// The file.
        path: PathBuf,
        /// The archive member or stream part.
        member: String,
        /// Byte position in the member (the opcode at fault).
        position: u64,
        /// What is wrong.
        detail: String,
    },

    /// A pickle stream went past a limit on its time tensorplay's pickle reader sets every run
    /// (its opcodes, or the walk of its values for tensors: their nesting, the values visited,
    /// the bytes of names built), far above what checkpoints need: refused unjudged, which says
    /// nothing of the file.
    #[error("{}: {member} at byte {position}: {what}, a fixed limit of tensorplay's pickle reader", .path.display())]
    PickleLimit {
        /// The file.
        path: PathBuf,
        /// The archive member or stream part.
        member: String,
        /// Byte position in the member (the opcode at fault).
        position: u64,
        /// What went past the limit.
        what: String,
    },

    /// A pickle's dict sets one key twice: Python keeps the last value, so a reader of any
    /// other would not read what a loader reads.
    #[error("{}: {member}: a dict sets the key {key} twice (pickle keeps the last value)", .path.display())]
    RepeatedKey {
        /// The file.
        path: PathBuf,
        /// The archive member or stream part.
        member: String,
        /// The key, as Python prints it.
        key: String,
    },

    /// A file its format's loader refuses, or that cannot be read as that loader reads it,
    /// outside its pickles: an archive or stream (zip, tar, legacy storages, DCP), a NumPy
    /// array (`np.load`), a joblib file (`joblib.load`), a GGUF file (gguf-py's `GGUFReader`,
    /// or ggml where it is stricter).
    #[error("{}: {part}: {detail}", .path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The part at fault: a member, `header`, `data`, `compression`, `array at byte N`,
        /// `tensor '…'` (after the `.npz` member holding it).
        part: String,
        /// What is wrong.
        detail: String,
    },

    /// A Git LFS pointer: the text git keeps in place of a file it has not fetched.
    #[error("{}: Git LFS pointer: run `git lfs pull` to fetch the file it stands for", .path.display())]
    LfsPointer {
        /// The pointer file.
        path: PathBuf,
    },

    /// A `torch.distributed.checkpoint`'s `.metadata` and its `.distcp` files disagree: an
    /// item outside its file, chunks that do not tile their tensor, a saved chunk unlike the
    /// metadata.
    #[error("{}: .metadata: {detail}", .path.display())]
    DistributedMismatch {
        /// The directory.
        path: PathBuf,
        /// What does not agree.
        detail: String,
    },

    /// One file of a checkpoint directory (a `.distcp` file: items saved one after another,
    /// which only the directory's `.metadata` locates).
    #[error("{}: {part}: not a checkpoint on its own (audit its directory)", .path.display())]
    DirectoryPart {
        /// The file.
        path: PathBuf,
        /// What the file is (`a .distcp file of a torch.distributed.checkpoint`).
        part: &'static str,
    },

    /// A symbolic link that cannot be followed: its target is missing, or links loop.
    #[error("{}: symlink to {} cannot be followed: {detail}", .path.display(), .target.display())]
    BrokenLink {
        /// The link, as given or found.
        path: PathBuf,
        /// What the link says, as written.
        target: PathBuf,
        /// Why it cannot be followed.
        detail: String,
    },

    /// A file was refused after some of its pickles had been read, and those reference
    /// globals outside the allowlist: a loader that got further than tensorplay would run them.
    #[error("{source}; its pickles also reference unsafe globals: {}", globals_text(.globals))]
    RefusedWithUnsafeGlobals {
        /// Why the file was refused.
        source: Box<Error>,
        /// The globals, in file order.
        globals: Vec<UnsafeGlobal>,
    },

    /// A zip archive that readers can read differently (two entries of one name, a central
    /// directory that is not where the end record says, an end record in a comment, ...):
    /// refused rather than guessed.
    #[error("{}: ambiguous archive: {reason}", .path.display())]
    AmbiguousArchive {
        /// The file.
        path: PathBuf,
        /// What readers could disagree on, naming the member or the offset.
        reason: String,
    },

    /// A file whose bytes are two formats at once, each read by a different loader, and whose
    /// name does not say which loader will read it: refused rather than guessed.
    #[error("{}: ambiguous format: {reason}", .path.display())]
    AmbiguousFormat {
        /// The file.
        path: PathBuf,
        /// The readings, and which loader takes each.
        reason: String,
    },

    /// Reading the file would hold more memory than the run allows (`--max-memory`): an
    /// inflate bomb, a pickle that builds far more than it weighs, or simply a file too big
    /// for the budget. Refused unjudged, which says nothing of the file.
    #[error("{}: exceeds the memory budget (--max-memory): the read would hold {}, more than the {} allowed, for {what}", .path.display(), bytes_exactly(*.needed), bytes_exactly(*.limit))]
    MemoryBudget {
        /// The file.
        path: PathBuf,
        /// Bytes the read would hold at once.
        needed: u64,
        /// The budget, in bytes.
        limit: u64,
        /// What would take them, naming the member or stream.
        what: String,
    },

    /// Arithmetic on a size, stride or offset overflowed 64 bits.
    #[error("{what} overflows 64-bit arithmetic")]
    Overflow {
        /// The quantity being computed.
        what: &'static str,
    },

    /// A layout's sizes and strides have different ranks.
    #[error("shape has {sizes} dimensions but strides have {strides}")]
    RankMismatch {
        /// Number of sizes.
        sizes: usize,
        /// Number of strides.
        strides: usize,
    },

    /// Bytes a reader points a storage at do not lie inside the file (or buffer) read.
    #[error("{}: byte range {start}..{end} lies outside its {len} bytes", path.display())]
    OutsideBuffer {
        /// The file.
        path: PathBuf,
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// The file's length.
        len: u64,
    },

    /// A tensor's DataPtr is not where its Storage says it should be.
    #[error("tensor '{tensor}': data pointer inconsistent with its storage: {detail}")]
    DataPtrInconsistent {
        /// The tensor.
        tensor: String,
        /// What does not agree.
        detail: String,
    },
}

/// What a read failure says about the input, for whoever reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The path could not be opened or read at all: a usage problem (a wrong path,
    /// permissions), not a finding about a checkpoint.
    Unopenable,
    /// The bytes are not a well-formed checkpoint: damaged, truncated, hostile or of an
    /// unknown format.
    Corrupt,
    /// A sharded index disagrees with its shards, or names a shard that cannot be opened.
    IndexMismatch,
    /// The file was not judged within a limit the run sets (`--max-memory`,
    /// `--max-remote-bytes`, `--max-requests`, `--remote-deadline`, `--timeout-per-file`):
    /// nothing is known of it, good or bad, and a larger limit may judge it.
    OverBudget,
}

/// Which bound on remote reading a read would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteBound {
    /// Bytes fetched by the run (`--max-remote-bytes`).
    Bytes,
    /// Range requests made by the run (`--max-requests`).
    Requests,
    /// Seconds the run's remote reading may take (`--remote-deadline`).
    Deadline,
}

impl RemoteBound {
    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            RemoteBound::Bytes => "--max-remote-bytes",
            RemoteBound::Requests => "--max-requests",
            RemoteBound::Deadline => "--remote-deadline",
        }
    }
}

impl Error {
    /// How this failure is to be reported. Every variant is listed, so a new one is
    /// classified where it is declared.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. } | Error::Remote { .. } => ErrorKind::Unopenable,
            Error::IndexShardPath { .. }
            | Error::IndexEmpty { .. }
            | Error::IndexTensorAbsent { .. }
            | Error::IndexTensorInTwoShards { .. }
            | Error::IndexUnlistedTensor { .. }
            | Error::IndexMixedFormats { .. }
            | Error::DistributedMismatch { .. } => ErrorKind::IndexMismatch,
            // A shard that is missing is the index's fault; a shard that is damaged is corrupt;
            // a shard over a limit is not judged, and neither is its index.
            Error::Shard { source, .. } => match source.kind() {
                ErrorKind::Unopenable | ErrorKind::IndexMismatch => ErrorKind::IndexMismatch,
                ErrorKind::Corrupt => ErrorKind::Corrupt,
                ErrorKind::OverBudget => ErrorKind::OverBudget,
            },
            // Refused over a limit, its globals named: not judged (the globals are reported
            // on their own). Refused for anything else: as corrupt as ever.
            Error::RefusedWithUnsafeGlobals { source, .. } => match source.kind() {
                ErrorKind::OverBudget => ErrorKind::OverBudget,
                _ => ErrorKind::Corrupt,
            },
            // Refused unread for a limit of the run, not for anything in the file.
            Error::MemoryBudget { .. }
            | Error::RemoteBudget { .. }
            | Error::TimeLimit { .. }
            | Error::PickleLimit { .. } => ErrorKind::OverBudget,
            Error::Empty { .. }
            | Error::UnknownFormat { .. }
            | Error::UnsupportedFormat { .. }
            | Error::Internal { .. }
            | Error::HeaderTooSmall { .. }
            | Error::HeaderTooLarge { .. }
            | Error::HeaderBeyondFile { .. }
            | Error::HeaderNotUtf8 { .. }
            | Error::HeaderSyntax { .. }
            | Error::DuplicateTensor { .. }
            | Error::InvalidTensor { .. }
            | Error::DataLength { .. }
            | Error::SafetensorsRejected { .. }
            | Error::IndexSyntax { .. }
            | Error::Pickle { .. }
            | Error::RepeatedKey { .. }
            | Error::Malformed { .. }
            | Error::LfsPointer { .. }
            | Error::DirectoryPart { .. }
            // A link in a checkpoint tree that leads nowhere is a finding about the tree (a
            // loader following it gets nothing), not a mistyped path.
            | Error::BrokenLink { .. }
            | Error::AmbiguousArchive { .. }
            | Error::AmbiguousFormat { .. }
            | Error::RemoteInconsistent { .. }
            | Error::Overflow { .. }
            | Error::RankMismatch { .. }
            | Error::DataPtrInconsistent { .. }
            | Error::OutsideBuffer { .. } => ErrorKind::Corrupt,
        }
    }
}

impl Error {
    /// Whether the file was refused for the memory budget (and named globals, perhaps): with
    /// more of the budget its reading could go further.
    pub fn over_budget(&self) -> bool {
        match self {
            Error::MemoryBudget { .. } => true,
            Error::RefusedWithUnsafeGlobals { source, .. } => source.over_budget(),
            _ => false,
        }
    }

    /// The refusal for a limit of the run inside this error (itself, or what a shard or a
    /// refusal naming globals wraps): what the file was refused for when its kind is
    /// [`ErrorKind::OverBudget`].
    pub fn over_limit(&self) -> Option<&Error> {
        match self {
            Error::MemoryBudget { .. }
            | Error::RemoteBudget { .. }
            | Error::TimeLimit { .. }
            | Error::PickleLimit { .. } => Some(self),
            Error::Shard { source, .. } | Error::RefusedWithUnsafeGlobals { source, .. } => {
                source.over_limit()
            }
            _ => None,
        }
    }

    /// The unsafe globals the refused file's pickles named before it was refused.
    pub fn unsafe_globals(&self) -> &[UnsafeGlobal] {
        match self {
            Error::RefusedWithUnsafeGlobals { globals, .. } => globals,
            _ => &[],
        }
    }

    /// This error of an archive nested as `member`, seen from its container: each global it
    /// names is placed under `member/`.
    pub(crate) fn nested_in(self, member: &str) -> Error {
        match self {
            Error::RefusedWithUnsafeGlobals {
                source,
                mut globals,
            } => {
                for global in &mut globals {
                    global.nest_under(member);
                }
                Error::RefusedWithUnsafeGlobals { source, globals }
            }
            error => error,
        }
    }

    /// This error with each global it names changed by `f`.
    pub(crate) fn map_unsafe_globals(self, f: impl FnMut(&mut UnsafeGlobal)) -> Error {
        match self {
            Error::RefusedWithUnsafeGlobals {
                source,
                mut globals,
            } => {
                globals.iter_mut().for_each(f);
                Error::RefusedWithUnsafeGlobals { source, globals }
            }
            error => error,
        }
    }

    /// This error, naming `globals` too when there are any.
    pub fn with_unsafe_globals(self, mut globals: Vec<UnsafeGlobal>) -> Error {
        if globals.is_empty() {
            return self;
        }
        // One list, in file order, however many layers of reading added to it; a layer (or a
        // second reading) may name again what another named.
        let source = match self {
            Error::RefusedWithUnsafeGlobals {
                source,
                globals: later,
            } => {
                globals.extend(later);
                source
            }
            error => Box::new(error),
        };
        // Repeats found by hash, not by copies of the (possibly long) names.
        let hasher = std::collections::hash_map::RandomState::new();
        let mut seen = std::collections::HashSet::new();
        globals.retain(|g| seen.insert(std::hash::BuildHasher::hash_one(&hasher, g)));
        Error::RefusedWithUnsafeGlobals { source, globals }
    }
}

/// How many unsafe globals a refusal names before it only counts the rest.
const GLOBALS_NAMED: usize = 20;

fn globals_text(globals: &[UnsafeGlobal]) -> String {
    let mut named: Vec<String> = globals
        .iter()
        .take(GLOBALS_NAMED)
        .map(|g| {
            format!(
                "{}.{} ({} at byte {})",
                clip(&g.module),
                clip(&g.name),
                g.member,
                g.position
            )
        })
        .collect();
    if let Some(more) = globals.len().checked_sub(GLOBALS_NAMED).filter(|&n| n > 0) {
        named.push(format!("and {more} more"));
    }
    named.join(", ")
}

/// A name cut to a readable length: a hostile pickle's names can be as long as the stream.
pub(crate) fn clip(name: &str) -> Cow<'_, str> {
    const MAX: usize = 200;
    match name.char_indices().nth(MAX) {
        Some((end, _)) => Cow::Owned(format!(
            "{}… ({} bytes)",
            name.get(..end).unwrap_or(name),
            name.len()
        )),
        None => Cow::Borrowed(name),
    }
}

fn remote_over(bound: RemoteBound, needed: u64, limit: u64) -> String {
    match bound {
        RemoteBound::Bytes => format!(
            "the run's remote reads would reach {}, more than the {} allowed",
            bytes_exactly(needed),
            bytes_exactly(limit)
        ),
        RemoteBound::Requests => {
            format!("the run would make {needed} range requests, more than the {limit} allowed")
        }
        RemoteBound::Deadline => format!(
            "the run's remote reads have gone on for {needed} s, past the {limit} s allowed; no \
             further request is sent"
        ),
    }
}

fn data_length_problem(data_end: u64, file_len: u64) -> &'static str {
    if data_end > file_len {
        "file is truncated"
    } else {
        "trailing bytes after the last tensor"
    }
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> PathBuf {
        PathBuf::from("m.index.json")
    }

    fn io() -> Error {
        Error::Io {
            path: path(),
            source: std::io::ErrorKind::NotFound.into(),
        }
    }

    fn in_shard(source: Error) -> Error {
        Error::Shard {
            path: path(),
            source: Box::new(source),
        }
    }

    fn syntax() -> Error {
        Error::IndexSyntax {
            path: path(),
            detail: "invalid JSON".into(),
        }
    }

    #[test]
    fn a_refusal_names_the_unsafe_globals_read_before_it() {
        let global = |position| UnsafeGlobal {
            module: "posix".into(),
            name: "system".into(),
            member: "legacy pickle 3 (sys_info)".into(),
            position,
            payload: String::new(),
        };
        assert!(matches!(
            syntax().with_unsafe_globals(Vec::new()),
            Error::IndexSyntax { .. }
        ));
        let e = syntax().with_unsafe_globals(vec![global(21)]);
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert_eq!(
            e.to_string(),
            "m.index.json: index: invalid JSON; its pickles also reference unsafe globals: \
             posix.system (legacy pickle 3 (sys_info) at byte 21)"
        );
        let many = syntax().with_unsafe_globals((0..25).map(global).collect());
        assert!(
            many.to_string().ends_with("at byte 19), and 5 more"),
            "{many}"
        );
    }

    #[test]
    fn a_path_that_cannot_be_read_is_unopenable() {
        assert_eq!(io().kind(), ErrorKind::Unopenable);
    }

    #[test]
    fn index_disagreements_and_missing_shards_are_index_mismatches() {
        let mismatches = [
            Error::IndexShardPath {
                path: path(),
                shard: "../x".into(),
            },
            Error::IndexEmpty { path: path() },
            Error::IndexTensorAbsent {
                path: path(),
                tensor: "w".into(),
                shard: "a".into(),
            },
            Error::IndexTensorInTwoShards {
                path: path(),
                tensor: "w".into(),
                first: "a".into(),
                second: "b".into(),
            },
            Error::IndexUnlistedTensor {
                path: path(),
                tensor: "w".into(),
                shard: "a".into(),
            },
            Error::IndexMixedFormats {
                path: path(),
                shard: "b".into(),
                found: "safetensors",
                expected: "a PyTorch zip archive",
            },
            Error::DistributedMismatch {
                path: path(),
                detail: "chunks of 'w' overlap".into(),
            },
            in_shard(io()),
            in_shard(in_shard(io())),
            in_shard(Error::IndexEmpty { path: path() }),
        ];
        for e in mismatches {
            assert_eq!(e.kind(), ErrorKind::IndexMismatch, "{e}");
        }
    }

    #[test]
    fn refusals_for_a_limit_of_the_run_are_over_budget_naming_the_flag_and_the_sizes() {
        let memory = Error::MemoryBudget {
            path: PathBuf::from("m.pt"),
            needed: 4_801_715_560,
            limit: 1 << 30,
            what: "relating the views of shared storages (20000 tensors view storage 0)".into(),
        };
        assert_eq!(
            memory.to_string(),
            "m.pt: exceeds the memory budget (--max-memory): the read would hold 4.5 GiB \
             (4801715560 bytes), more than the 1.0 GiB (1073741824 bytes) allowed, for \
             relating the views of shared storages (20000 tensors view storage 0)"
        );
        let bytes = Error::RemoteBudget {
            path: PathBuf::from("hf://o/m/w.safetensors"),
            bound: RemoteBound::Bytes,
            needed: 1 << 20,
            limit: 512 << 10,
        };
        assert_eq!(
            bytes.to_string(),
            "hf://o/m/w.safetensors: exceeds the remote read budget (--max-remote-bytes): the \
             run's remote reads would reach 1.0 MiB (1048576 bytes), more than the 512.0 KiB \
             (524288 bytes) allowed"
        );
        let requests = Error::RemoteBudget {
            path: PathBuf::from("hf://o/m/w.safetensors"),
            bound: RemoteBound::Requests,
            needed: 3,
            limit: 2,
        };
        assert!(
            requests.to_string().ends_with(
                "(--max-requests): the run would make 3 range requests, more than the 2 allowed"
            ),
            "{requests}"
        );
        let deadline = Error::RemoteBudget {
            path: PathBuf::from("hf://o/m/w.safetensors"),
            bound: RemoteBound::Deadline,
            needed: 601,
            limit: 600,
        };
        assert!(
            deadline.to_string().ends_with(
                "(--remote-deadline): the run's remote reads have gone on for 601 s, past the \
                 600 s allowed; no further request is sent"
            ),
            "{deadline}"
        );
        let time = Error::TimeLimit {
            path: PathBuf::from("m.pt"),
            seconds: 5,
        };
        assert!(
            time.to_string()
                .contains("(--timeout-per-file): not judged within the 5 s allowed"),
            "{time}"
        );
        for e in [memory, bytes, requests, time] {
            let text = e.to_string();
            assert_eq!(e.kind(), ErrorKind::OverBudget, "{text}");
            assert!(e.over_limit().is_some(), "{text}");
            // Over a limit in a shard, or refused naming globals: still over the limit.
            let global = UnsafeGlobal {
                module: "posix".into(),
                name: "system".into(),
                member: "data.pkl".into(),
                position: 2,
                payload: String::new(),
            };
            let wrapped = in_shard(e.with_unsafe_globals(vec![global]));
            assert_eq!(wrapped.kind(), ErrorKind::OverBudget, "{wrapped}");
            assert!(
                wrapped
                    .over_limit()
                    .is_some_and(|inner| text == inner.to_string()),
                "{wrapped}"
            );
        }
        // Refused naming globals for anything else: corrupt, with no limit in it.
        let damaged = Error::Empty { path: path() }.with_unsafe_globals(vec![UnsafeGlobal {
            module: "posix".into(),
            name: "system".into(),
            member: "data.pkl".into(),
            position: 2,
            payload: String::new(),
        }]);
        assert_eq!(damaged.kind(), ErrorKind::Corrupt);
        assert!(damaged.over_limit().is_none());
    }

    #[test]
    fn damaged_files_and_damaged_shards_are_corrupt() {
        let corrupt = [
            Error::Empty { path: path() },
            syntax(),
            in_shard(Error::Empty { path: path() }),
            in_shard(in_shard(syntax())),
            Error::Overflow { what: "size" },
            Error::LfsPointer { path: path() },
            Error::DirectoryPart {
                path: path(),
                part: "a .distcp file",
            },
            Error::RepeatedKey {
                path: path(),
                member: ".metadata".into(),
                key: "'offset'".into(),
            },
            Error::BrokenLink {
                path: path(),
                target: path(),
                detail: "target does not exist".into(),
            },
            Error::AmbiguousArchive {
                path: path(),
                reason: "two entries are named 'a/data.pkl'".into(),
            },
        ];
        for e in corrupt {
            assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
        }
    }
}
