//! Which files an audit covers: paths given, directories walked, files sniffed by content.

use std::path::{Path, PathBuf};
use tensorplay_audit::report::Skipped;
use tensorplay_engine::load::{self, Probe, ShardIndex, Sniffed};

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
    /// Checkpoints (files or indexes), sorted by path, each once.
    pub checkpoints: Vec<Target>,
    /// Files seen but not audited.
    pub skipped: Vec<Skipped>,
}

/// A checkpoint to audit, looked at once: what probing it found, for `load::read`, or why it
/// could not be probed, which the audit reports as it would a failed read.
#[derive(Debug)]
pub struct Target {
    path: PathBuf,
    probe: tensorplay_engine::Result<Probe>,
}

impl Target {
    fn probe(path: PathBuf) -> Self {
        let probe = load::probe(&path);
        Target { path, probe }
    }

    /// The path as given or found.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What probing found, ready for `load::read`.
    pub fn into_probe(self) -> tensorplay_engine::Result<Probe> {
        self.probe
    }

    fn index(&self) -> Option<&ShardIndex> {
        self.probe.as_ref().ok().and_then(Probe::index)
    }
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
            found.checkpoints.push(Target::probe(path.clone()));
        }
    }
    drop_covered_shards(&mut found);
    found.checkpoints.sort_by(|a, b| a.path.cmp(&b.path));
    found.checkpoints.dedup_by(|a, b| a.path == b.path);
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
    let target = Target::probe(path.clone());
    match &target.probe {
        Ok(p) if p.sniffed() == Sniffed::JsonIndex && p.index().is_none() && !named_as_index => {
            skip("JSON, not a checkpoint index", found)
        }
        Ok(p) if p.sniffed() != Sniffed::Unknown => found.checkpoints.push(target),
        _ if meant_as_checkpoint || named_as_index => found.checkpoints.push(target),
        Ok(_) => skip("not a checkpoint (unrecognised content)", found),
        Err(e) => skip(&e.to_string(), found),
    }
}

/// Shards of an index found in the walk are audited through the index, not twice.
fn drop_covered_shards(found: &mut Discovered) {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_owned());
    let mut covered: Vec<(PathBuf, String)> = Vec::new();
    for target in &found.checkpoints {
        for shard in target.index().map(ShardIndex::shards).unwrap_or_default() {
            covered.push((
                canonical(&ShardIndex::shard_path(&target.path, shard)),
                target.path.display().to_string(),
            ));
        }
    }
    if covered.is_empty() {
        return;
    }
    let mut kept = Vec::with_capacity(found.checkpoints.len());
    for target in std::mem::take(&mut found.checkpoints) {
        let c = canonical(&target.path);
        match covered.iter().find(|(shard, _)| *shard == c) {
            // An index listed as another's shard is still audited as an index.
            Some((_, index)) if target.index().is_none() => found.skipped.push(Skipped {
                path: target.path.display().to_string(),
                reason: format!("shard of {index}"),
            }),
            _ => kept.push(target),
        }
    }
    found.checkpoints = kept;
}
