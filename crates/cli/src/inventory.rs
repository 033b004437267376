//! The files of a checkpoint for its bill of materials (`--cyclonedx`): each hashed with
//! SHA-256 while the audit reads it, or said not to be.
//!
//! The hash runs on a thread of its own beside the file's audit, reading the file from start
//! to end: the byte scan (TP401) reads the same pages, so the disk is read once and the run
//! takes about the longer of the two, not their sum. It cannot be the scan itself: the scan
//! reads storages side by side and out of file order, and inflates compressed records, where
//! SHA-256 needs every byte of the file in order. A run that reads no tensor bytes
//! (`--metadata-only`, a remote path without `--deep`) hashes nothing: each file says so
//! rather than reading what the run promised not to read.

use anyhow::Context as _;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use tensorplay_audit::inventory::{config_architecture, hex, Architecture, FileDigest, Inventory};
use tensorplay_audit::report::FileReport;
use tensorplay_engine::files;

/// A `config.json` larger than this is not read: the real ones are kilobytes.
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Why a run hashes none of a checkpoint's files, or `None` when it hashes them all.
pub fn why_not_hashed(path: &Path, metadata_only: bool) -> Option<&'static str> {
    if files::is_remote(path) {
        // With --deep every byte is fetched, but by ranges into a sparse map that the read
        // layer does not keep whole; a second fetch to hash would double the transfer.
        return Some("not computed: a remote object is read by byte ranges, never whole");
    }
    metadata_only.then_some("not computed: --metadata-only reads no tensor bytes")
}

/// The files of the checkpoint at `path` (`parts`, as probing found them), hashed unless
/// `why_not` says why not (or, for one that cannot be read, saying why not), and the `config.json` beside it with the architecture it names.
pub fn gather(
    path: &Path,
    parts: &[PathBuf],
    why_not: Option<&str>,
) -> (Vec<FileDigest>, Option<Architecture>) {
    let mut digests = Vec::with_capacity(parts.len() + 1);
    for part in parts {
        digests.push(match why_not {
            Some(reason) => FileDigest {
                path: part.display().to_string(),
                size: size(part),
                sha256: None,
                not_hashed: Some(reason.to_owned()),
            },
            // A file that cannot be read is the audit's to judge (a sharded index naming a
            // missing shard fails TP503): the BOM says why it has no hash.
            None => hash_file(part).unwrap_or_else(|e| FileDigest {
                path: part.display().to_string(),
                size: size(part),
                sha256: None,
                not_hashed: Some(format!("not computed: {e:#}")),
            }),
        });
    }
    let mut architecture = None;
    if !files::is_remote(path) {
        let dir = if path.is_dir() {
            Some(path)
        } else {
            path.parent()
        };
        let config = dir.map(|d| d.join("config.json"));
        if let Some(config) = config.filter(|c| c.is_file() && !parts.contains(c)) {
            let (digest, arch) = read_config(&config);
            digests.push(digest);
            architecture = arch;
        }
    }
    (digests, architecture)
}

/// Adds what [`gather`] found to `file`'s inventory (made here for a file the readers
/// refused, which has no other inventory): `config.json`'s architecture over a GGUF's.
pub fn attach(file: &mut FileReport, digests: Vec<FileDigest>, arch: Option<Architecture>) {
    let inventory = file.inventory.get_or_insert_with(Inventory::default);
    inventory.files = digests;
    if arch.is_some() {
        inventory.architecture = arch;
    }
}

/// `path`'s size and SHA-256, read from start to end in bounded chunks.
fn hash_file(path: &Path) -> anyhow::Result<FileDigest> {
    let shown = path.display().to_string();
    if files::stats(path).is_some() {
        // A remote object read whole already (a signature verified): its fetched bytes, not
        // fetched again.
        let bytes = files::read_whole(path).with_context(|| format!("{shown}: cannot hash it"))?;
        return Ok(FileDigest {
            path: shown,
            size: Some(bytes.len() as u64),
            sha256: Some(hex(&Sha256::digest(&bytes))),
            not_hashed: None,
        });
    }
    let mut file =
        std::fs::File::open(path).with_context(|| format!("{shown}: cannot open to hash it"))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buffer)
            .with_context(|| format!("{shown}: cannot read to hash it"))?;
        if n == 0 {
            break;
        }
        size = size.saturating_add(n as u64);
        hasher.update(buffer.get(..n).unwrap_or_default());
    }
    Ok(FileDigest {
        path: shown,
        size: Some(size),
        sha256: Some(hex(&hasher.finalize())),
        not_hashed: None,
    })
}

/// `config.json`'s digest and the architecture it names (none when it names none readable).
/// It is small and read whole, so it is hashed in any run.
fn read_config(path: &Path) -> (FileDigest, Option<Architecture>) {
    let shown = path.display().to_string();
    let size = size(path);
    if size.is_none_or(|s| s > MAX_CONFIG_BYTES) {
        let digest = FileDigest {
            path: shown,
            size,
            sha256: None,
            not_hashed: Some(format!(
                "not computed: larger than the {} MiB a config.json is read up to",
                MAX_CONFIG_BYTES >> 20
            )),
        };
        return (digest, None);
    }
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) => {
            let digest = FileDigest {
                path: shown.clone(),
                size,
                sha256: None,
                not_hashed: Some(format!("not computed: {shown}: cannot read: {e}")),
            };
            return (digest, None);
        }
    };
    let digest = FileDigest {
        path: shown.clone(),
        size: Some(text.len() as u64),
        sha256: Some(hex(&Sha256::digest(&text))),
        not_hashed: None,
    };
    (digest, config_architecture(&shown, &text).ok())
}

/// A local file's size, or a mounted remote object's as its store listed it.
fn size(path: &Path) -> Option<u64> {
    match files::stats(path) {
        Some(stats) => Some(stats.len),
        None => std::fs::metadata(path).ok().map(|m| m.len()),
    }
}
