//! The format table: every input tensorplay reads, one row each, declared next to its reader
//! (each reader module's `ROW`) and gathered in [`FORMATS`] in the order the real loaders try
//! them. A row says which loader opens such an input, by which of that loader's own rules it
//! accepts one (a file's whole bytes, a zip archive's records, a directory's files), the names
//! the ecosystem gives it, and its reader.
//!
//! Adding a format is its reader module (with its `ROW`), one line here and its
//! [`Format`] variant: sniffing, the zip reader, directory probing, discovery's names and a
//! polyglot's names all read this table.

use super::chat_template;
use super::dcp;
use super::gguf;
use super::hdf5;
use super::index;
use super::joblib;
use super::keras;
use super::limits::Meter;
use super::numpy;
use super::pickle_file;
use super::polyglot;
use super::pt2;
use super::safetensors;
use super::sb3;
use super::sniff::{self, Prefix, Sniffed};
use super::torch::{self, archive::Archive};
use super::zip::{self, Zip};
use super::Sink;
use crate::error::Result;
use crate::{Format, HostBuffer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Every format, by the loader that opens it. Order matters within one kind of rule: files as
/// `torch.load` tries them (zip, then `tarfile`, then the legacy stream) with `np.load`'s,
/// GGUF's and HDF5's magics first, which no other loader's input begins with, and the pickle
/// loaders last, which take whatever runs; zip archives as torch tells them apart, the last
/// claiming any.
#[rustfmt::skip]
pub(crate) const FORMATS: [&Row; 20] = [
    // Files, by their whole bytes.
    &numpy::ROW,
    &gguf::ROW,
    &hdf5::ROW,
    &torch::tar::ROW,
    &zip::kind::ROW,
    &torch::legacy::ROW,
    &polyglot::ROW,
    &safetensors::ROW,
    &index::ROW,
    &sniff::LFS_POINTER,
    &pickle_file::ROW,
    &joblib::ROW,
    // Zip archives, by their records.
    &numpy::NPZ,
    &pt2::flat::ROW,
    &keras::ROW,
    &sb3::ROW,
    &pt2::ROW,
    &torch::archive::ROW,
    // Directories, by their files.
    &dcp::ROW,
    // Files, by their names (before their bytes: what opens them looks at nothing else).
    &chat_template::ROW,
];

/// One format.
pub(crate) struct Row {
    /// What such an input is, in messages.
    pub what: &'static str,
    /// The real loader that opens it, whose rule `accepts` follows.
    pub loader: &'static str,
    /// Names the ecosystem gives such inputs (extensions, ASCII case ignored). Never what picks
    /// a reader: a walk audits a file so named when no loader accepts it (a corrupt
    /// checkpoint, TP502), and a polyglot's name says which loader it is handed to.
    pub extensions: &'static [&'static str],
    /// How its loader accepts an input, and what reads it.
    pub accepts: Accepts,
}

/// A loader's rule for accepting an input, by what it looks at.
pub(crate) enum Accepts {
    /// A file, by its whole bytes.
    Bytes(FileRule),
    /// A zip archive, by its records once open.
    Records(ZipKind),
    /// A directory, by its files.
    Directory(DirReader),
    /// A file, by its name alone, whatever its bytes: what a library opens by file name
    /// (transformers' `tokenizer_config.json`).
    Name(NameRule),
}

/// The file names a row's loader opens, and its reader.
#[derive(Clone, Copy)]
pub(crate) struct NameRule {
    /// Exact file names (case as written: the Hub's names are case-sensitive).
    pub names: &'static [&'static str],
    /// What such a file is read as.
    pub format: Format,
    pub read: ReadFn,
}

/// A reader: writes one file's tensors and storages (and its metadata) through `sink` and
/// says which format the file is.
pub(crate) type ReadFn = fn(&Arc<HostBuffer>, &mut Sink<'_>) -> Result<Format>;

/// Whether a file's bytes are of a row, and its reader.
#[derive(Clone, Copy)]
pub(crate) struct FileRule {
    /// What the file is, when `accepts` says so.
    pub sniffed: Sniffed,
    /// The loader's rule over the whole file (no window: a first operand may run far), given
    /// what is read of it so far: `None` when only more of the file decides (never when
    /// given the whole).
    pub accepts: fn(Prefix<'_>) -> Option<bool>,
    /// `None` for what is no checkpoint alone (an index is read through its shards).
    pub read: Option<FileReader>,
}

/// What reads a file of a row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileReader {
    pub read: ReadFn,
    /// The format a sharded set of such files forms; an index's shards may mix only within
    /// one.
    pub index: Format,
    /// Whether the reader itself reads the bytes as `pickle.load` runs them. When it does not,
    /// and CPython would run the same bytes as a pickle (`pickle.load`, `np.load`'s and
    /// `joblib.load`'s fallback, `torch.load`'s legacy path), that reading's globals are named
    /// beside the file's own: every loader that accepts the bytes judges them.
    pub reads_pickle: bool,
}

/// One kind of zip archive: how its records are resolved, whether an archive is of this kind,
/// and its reader.
pub(crate) struct ZipKind {
    /// The archive as the kind's loader opens it (under a folder, or from the root).
    pub archive: for<'a> fn(&'a Arc<HostBuffer>, Zip<'a>, &'a Meter) -> Result<Archive<'a>>,
    /// Whether the archive is of this kind, as its loader decides.
    pub claims: fn(&Archive<'_>) -> Result<bool>,
    pub read: fn(Archive<'_>, &mut Sink<'_>) -> Result<Format>,
}

/// A checkpoint made of a directory of files.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirReader {
    /// The files that make `dir` one, in reading order; `None` when it is not one.
    pub files: fn(&Path) -> Option<Vec<PathBuf>>,
    /// Whether a file is one part of such a directory, never a checkpoint alone.
    pub is_part: fn(&Path) -> bool,
    pub read: fn(&Path, &mut Sink<'_>) -> Result<Format>,
    /// What one of its files is, in messages.
    pub part: &'static str,
}

/// A file's reader, with what such a file is in messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader {
    pub file: FileReader,
    pub what: &'static str,
}

/// The file rules, in order.
pub(crate) fn file_rules() -> impl Iterator<Item = (&'static Row, &'static FileRule)> {
    FORMATS.into_iter().filter_map(|row| match &row.accepts {
        Accepts::Bytes(rule) => Some((row, rule)),
        _ => None,
    })
}

/// The zip kinds, in order.
pub(crate) fn zip_kinds() -> impl Iterator<Item = &'static ZipKind> {
    FORMATS.into_iter().filter_map(|row| match &row.accepts {
        Accepts::Records(kind) => Some(kind),
        _ => None,
    })
}

/// The directory readers, with what each directory is.
pub(crate) fn directory_readers() -> impl Iterator<Item = (&'static str, DirReader)> {
    FORMATS.into_iter().filter_map(|row| match row.accepts {
        Accepts::Directory(reader) => Some((row.what, reader)),
        _ => None,
    })
}

/// The reader of a file its name decides, with what it is, given what its bytes are
/// (`sniffed`): a `tokenizer_config.json` is JSON, but no index. Bytes a checkpoint loader
/// takes (a zip, GGUF, `.npy`, an LFS pointer…) are read as those, whatever the name: no
/// template loader reads them as text, and every loader that would open them judges them. A
/// text that CPython would also run as a pickle is read by name, with that pickle's globals
/// judged beside it (`read_judged`).
pub(crate) fn named_reader(path: &Path, sniffed: Sniffed) -> Option<(Reader, Format)> {
    let text = matches!(
        sniffed,
        Sniffed::Unknown | Sniffed::JsonIndex | Sniffed::Format(Format::Pickle)
    );
    if !text {
        return None;
    }
    let name = path.file_name()?.to_str()?;
    FORMATS.into_iter().find_map(|row| match &row.accepts {
        Accepts::Name(rule) if rule.names.contains(&name) => Some((
            Reader {
                file: FileReader {
                    read: rule.read,
                    index: rule.format,
                    // Text no loader unpickles; the bytes are judged as a pickle all the
                    // same where CPython would run them (`read_judged`).
                    reads_pickle: false,
                },
                what: row.what,
            },
            rule.format,
        )),
        _ => None,
    })
}

/// The reader of files `kind` names; `None` for what nothing reads alone.
pub(crate) fn reader(kind: Sniffed) -> Option<Reader> {
    file_rules()
        .find(|(_, rule)| rule.sniffed == kind)
        .and_then(|(row, rule)| {
            Some(Reader {
                file: rule.read?,
                what: row.what,
            })
        })
}

/// Whether `path`'s name is one a row's loader is handed (`loader` `None`: any row's).
pub(crate) fn named_for(path: &Path, loader: Option<fn(&str) -> bool>) -> bool {
    let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
        return false;
    };
    FORMATS
        .into_iter()
        .filter(|row| loader.is_none_or(|takes| takes(row.loader)))
        .any(|row| row.extensions.iter().any(|e| e.eq_ignore_ascii_case(ext)))
}

/// Whether a file's name says it was meant to be a checkpoint of some row: a walk audits it
/// (and fails it, TP502) even when no loader accepts its bytes.
pub fn named_as_checkpoint(path: &Path) -> bool {
    named_for(path, None)
}

/// Every name a row's loader is handed, sorted, each once: the one list the pre-commit
/// manifests and the docs are generated from (`tests/extensions.rs`).
pub fn checkpoint_extensions() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = FORMATS
        .iter()
        .flat_map(|row| row.extensions)
        .copied()
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Every exact file name a row's loader is handed whatever its extension (transformers'
/// `tokenizer_config.json`), sorted, each once: generated into the pre-commit manifests beside
/// the extensions (`tests/extensions.rs`).
pub fn checkpoint_file_names() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = FORMATS
        .iter()
        .filter_map(|row| match &row.accepts {
            Accepts::Name(rule) => Some(rule.names),
            _ => None,
        })
        .flatten()
        .copied()
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_rule_names_a_distinct_kind() {
        let kinds: Vec<Sniffed> = file_rules().map(|(_, rule)| rule.sniffed).collect();
        for (i, kind) in kinds.iter().enumerate() {
            assert!(!kinds[..i].contains(kind), "{kind:?} twice");
        }
        assert!(!kinds.contains(&Sniffed::Unknown));
    }

    #[test]
    fn the_exact_names_are_those_a_name_rule_reads() {
        let names = checkpoint_file_names();
        assert_eq!(
            names,
            [
                "chat_template.jinja",
                "chat_template.json",
                "tokenizer_config.json"
            ]
        );
        for name in names {
            assert!(named_reader(Path::new(name), Sniffed::Unknown).is_some());
        }
    }

    #[test]
    fn names_are_matched_ignoring_case_and_by_loader() {
        assert!(named_as_checkpoint(Path::new("a/model.SafeTensors")));
        assert!(named_as_checkpoint(Path::new("x.distcp")));
        assert!(!named_as_checkpoint(Path::new("README")));
        assert!(!named_as_checkpoint(Path::new("notes.txt")));
        let pickled = |loader: &str| loader.contains("torch.load") || loader.contains("pickle");
        assert!(named_for(Path::new("last.ckpt"), Some(pickled)));
        assert!(!named_for(Path::new("m.safetensors"), Some(pickled)));
    }

    #[test]
    fn template_files_are_found_by_their_exact_name() {
        let named =
            |p: &str| named_reader(Path::new(p), Sniffed::Unknown).map(|(_, format)| format);
        assert_eq!(named("m/tokenizer_config.json"), Some(Format::ChatTemplate));
        assert_eq!(named("chat_template.jinja"), Some(Format::ChatTemplate));
        assert_eq!(named("a/chat_template.json"), Some(Format::ChatTemplate));
        assert_eq!(named("Tokenizer_Config.json"), None);
        assert_eq!(named("config.json"), None);
        assert_eq!(named("x.jinja"), None);
        // JSON, and a text that is a pickle too, are read by name; a checkpoint's bytes are
        // read as the checkpoint they are.
        let as_json = named_reader(Path::new("tokenizer_config.json"), Sniffed::JsonIndex);
        assert!(as_json.is_some());
        let pickled = named_reader(
            Path::new("chat_template.jinja"),
            Sniffed::Format(Format::Pickle),
        );
        assert!(pickled.is_some_and(|(reader, _)| !reader.file.reads_pickle));
        for sniffed in [
            Sniffed::Format(Format::Gguf),
            Sniffed::Zip,
            Sniffed::LfsPointer,
        ] {
            assert!(
                named_reader(Path::new("chat_template.jinja"), sniffed).is_none(),
                "{sniffed:?}"
            );
        }
    }
}
