//! Which files an audit covers: paths given, directories walked, files sniffed by content.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tensorplay_audit::report::Skipped;
use tensorplay_engine::load::{self, ShardIndex, Sniffed};

/// Extensions that say a file was meant to be a checkpoint. Content alone picks the reader;
/// the extension only decides whether unrecognised content is a corrupt checkpoint (audited,
/// TP502) or some other file in the folder (skipped).
const CHECKPOINT_EXTENSIONS: &[&str] = &[
    "safetensors",
    "pt",
    "pth",
    "bin",
    "ckpt",
    "pkl",
    "pickle",
    "tar",
];

/// What to audit and what was passed over.
#[derive(Debug, Default)]
pub struct Discovered {
    /// Checkpoints (files or indexes), sorted, each once.
    pub checkpoints: Vec<PathBuf>,
    /// Files seen but not audited.
    pub skipped: Vec<Skipped>,
}

/// Expands the command-line paths. A path that does not exist is an error.
pub fn discover(paths: &[PathBuf]) -> anyhow::Result<Discovered> {
    let mut found = Discovered::default();
    for path in paths {
        let meta = std::fs::metadata(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
        if meta.is_dir() {
            walk(path, &mut found)?;
        } else {
            // Named explicitly: always audited, so unreadable content is reported, never skipped.
            found.checkpoints.push(path.clone());
        }
    }
    drop_covered_shards(&mut found);
    found.checkpoints.sort();
    found.checkpoints.dedup();
    found.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

fn walk(dir: &Path, found: &mut Discovered) -> anyhow::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if hidden || meta.file_type().is_symlink() {
            continue;
        }
        if meta.is_dir() {
            walk(&path, found)?;
        } else if meta.is_file() {
            classify(path, found);
        }
    }
    Ok(())
}

fn classify(path: PathBuf, found: &mut Discovered) {
    let skip = |reason: &str, found: &mut Discovered| {
        found.skipped.push(Skipped {
            path: path.display().to_string(),
            reason: reason.to_owned(),
        })
    };
    let meant_as_checkpoint = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| CHECKPOINT_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
    let named_as_index = path.to_string_lossy().ends_with(".index.json");
    match load::sniff_file(&path) {
        Ok(Sniffed::Safetensors | Sniffed::Zip | Sniffed::LegacyPickle) => {
            found.checkpoints.push(path)
        }
        Ok(Sniffed::JsonIndex) if named_as_index || ShardIndex::read(&path).is_ok() => {
            found.checkpoints.push(path)
        }
        Ok(Sniffed::JsonIndex) => skip("JSON, not a checkpoint index", found),
        _ if meant_as_checkpoint || named_as_index => found.checkpoints.push(path),
        Ok(_) => skip("not a checkpoint (unrecognised content)", found),
        Err(e) => skip(&e.to_string(), found),
    }
}

/// Shards of an index found in the walk are audited through the index, not twice.
fn drop_covered_shards(found: &mut Discovered) {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_owned());
    // Only JSON files can be indexes; checking content first leaves checkpoints unread here.
    let indexes: HashMap<PathBuf, ShardIndex> = found
        .checkpoints
        .iter()
        .filter(|p| matches!(load::sniff_file(p), Ok(Sniffed::JsonIndex)))
        .filter_map(|p| Some((p.clone(), ShardIndex::read(p).ok()?)))
        .collect();
    let mut covered: Vec<(PathBuf, String)> = Vec::new();
    for (index_path, index) in &indexes {
        for shard in index.shards() {
            covered.push((
                canonical(&ShardIndex::shard_path(index_path, shard)),
                index_path.display().to_string(),
            ));
        }
    }
    if covered.is_empty() {
        return;
    }
    let mut kept = Vec::with_capacity(found.checkpoints.len());
    for path in std::mem::take(&mut found.checkpoints) {
        let c = canonical(&path);
        match covered.iter().find(|(shard, _)| *shard == c) {
            Some((_, index)) if !indexes.contains_key(&path) => found.skipped.push(Skipped {
                path: path.display().to_string(),
                reason: format!("shard of {index}"),
            }),
            _ => kept.push(path),
        }
    }
    found.checkpoints = kept;
}
