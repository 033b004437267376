//! Which files an audit covers: paths given, directories walked, files sniffed by content.
//!
//! The walk sees what a loader sees: symlinks are followed (the Hugging Face cache is all
//! links into `blobs/`), dot-files are included, and every regular file is sniffed, whatever
//! its name. Whatever is not audited is listed as skipped with its reason: non-checkpoints,
//! special files, unreadable directories, directory loops, second paths to one file.

use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tensorplay_audit::config::Config;
use tensorplay_audit::report::{SkipRule, Skipped};
use tensorplay_engine::files;
use tensorplay_engine::load::{self, Probe, ShardIndex, Sniffed};

/// What to audit and what was passed over.
#[derive(Debug, Default)]
pub struct Discovered {
    /// Checkpoints (files or indexes), sorted by path, each once.
    pub checkpoints: Vec<Target>,
    /// Files seen but not audited.
    pub skipped: Vec<Skipped>,
    /// Of those, files named on the command line that no loader accepts: judged not to be
    /// checkpoints, as they would be in a walk, so an audit of them is not an audit of nothing.
    pub named_skipped: usize,
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

    /// The files it is made of (an index and its shards, a directory's files), as probing
    /// found them; the path alone when it could not be probed.
    pub fn files(&self) -> Vec<PathBuf> {
        match &self.probe {
            Ok(probe) => probe.files(),
            Err(_) => vec![self.path.clone()],
        }
    }

    /// The path as given or found.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The same path probed afresh, to be read again.
    pub fn again(path: PathBuf) -> Self {
        Target::probe(path)
    }

    /// What probing found, ready for `load::read`.
    pub fn into_probe(self) -> tensorplay_engine::Result<Probe> {
        self.probe
    }

    /// The sharded-checkpoint index it is, if one.
    pub fn index(&self) -> Option<&ShardIndex> {
        self.probe.as_ref().ok().and_then(Probe::index)
    }
}

/// Expands the command-line paths. A path that does not exist is an error; a symlink named
/// on the command line whose target does not is audited, and fails naming the target.
pub fn discover(paths: &[PathBuf]) -> anyhow::Result<Discovered> {
    let mut walk = Walk::default();
    for path in paths {
        if files::is_dir(path) && !path.exists() {
            walk.remote_dir(path);
            continue;
        }
        if files::is_remote(path) {
            walk.file(path, true);
            continue;
        }
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => walk.dir(path, &mut Vec::new()),
            // Named explicitly: always audited, so unreadable content is reported, never skipped.
            Ok(meta) if meta.is_file() => walk.file(path, true),
            Ok(meta) => anyhow::bail!("{}: cannot audit: {}", path.display(), not_regular(&meta)),
            Err(_) if is_symlink(path) => walk.broken_link(path),
            Err(e) => anyhow::bail!("{}: cannot read: {e}", path.display()),
        }
    }
    let mut found = walk.finish();
    drop_covered_shards(&mut found);
    found.checkpoints.sort_by(|a, b| a.path.cmp(&b.path));
    found.checkpoints.dedup_by(|a, b| a.path == b.path);
    found.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// A regular file the walk reached, before it is looked at: several paths may reach one file.
#[derive(Debug)]
struct Reached {
    path: PathBuf,
    /// The file itself, every link resolved.
    real: PathBuf,
    /// Named on the command line.
    named: bool,
    /// The path's last component is a symlink.
    link: bool,
}

#[derive(Debug, Default)]
struct Walk {
    files: Vec<Reached>,
    /// Each directory walked, by its real path, with the path it was walked under.
    walked: HashMap<PathBuf, PathBuf>,
    found: Discovered,
}

impl Walk {
    /// Walks `dir`; `ancestors` are the real paths of the directories it lies in.
    fn dir(&mut self, dir: &Path, ancestors: &mut Vec<PathBuf>) {
        let real = match dir.canonicalize() {
            Ok(real) => real,
            Err(e) => {
                return self.skip(
                    dir,
                    SkipRule::NotWalked,
                    format!("cannot read directory: {e}"),
                )
            }
        };
        if let Some(first) = self.walked.get(&real) {
            let reason = match ancestors.contains(&real) {
                true => format!("symlink loop: leads back to {}", first.display()),
                false => format!("directory already walked as {}", first.display()),
            };
            return self.skip(dir, SkipRule::NotWalked, reason);
        }
        self.walked.insert(real.clone(), dir.to_owned());
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                return self.skip(
                    dir,
                    SkipRule::NotWalked,
                    format!("cannot read directory: {e}"),
                )
            }
        };
        let mut paths = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => paths.push(entry.path()),
                Err(e) => self.skip(
                    dir,
                    SkipRule::NotWalked,
                    format!("a directory entry cannot be read: {e}"),
                ),
            }
        }
        paths.sort();
        let parts = self.checkpoint_directory(dir);
        ancestors.push(real);
        for path in paths {
            if let Some(reason) = parts.as_ref().and_then(|parts| parts(&path)) {
                self.skip(&path, SkipRule::DirectoryPart, reason);
                continue;
            }
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_dir() => self.dir(&path, ancestors),
                Ok(meta) if meta.is_file() => self.file(&path, false),
                Ok(meta) => self.skip(&path, SkipRule::NotWalked, not_regular(&meta)),
                Err(_) if is_symlink(&path) => self.broken_link(&path),
                Err(e) => self.skip(&path, SkipRule::NotWalked, format!("cannot read: {e}")),
            }
        }
        ancestors.pop();
    }

    /// Walks a directory of mounted remote objects: no links, no loops, every entry a file
    /// or a directory.
    fn remote_dir(&mut self, dir: &Path) {
        let mut paths = files::list_dir(dir).unwrap_or_default();
        paths.sort();
        let parts = self.checkpoint_directory(dir);
        for path in paths {
            if let Some(reason) = parts.as_ref().and_then(|parts| parts(&path)) {
                self.skip(&path, SkipRule::DirectoryPart, reason);
            } else if files::is_dir(&path) {
                self.remote_dir(&path);
            } else {
                self.file(&path, false);
            }
        }
    }

    /// A checkpoint directory (torch.distributed.checkpoint) is audited as one checkpoint:
    /// queued here, with what says why each of its files is skipped as its part.
    fn checkpoint_directory(&mut self, dir: &Path) -> Option<impl Fn(&Path) -> Option<String>> {
        let probe = load::probe_directory(dir)?;
        let parts = probe.files();
        let reason = format!(
            "part of the {} {}",
            probe.directory().unwrap_or_default(),
            dir.display()
        );
        self.found.checkpoints.push(Target {
            path: dir.to_owned(),
            probe: Ok(probe),
        });
        Some(move |path: &Path| parts.contains(&path.to_path_buf()).then(|| reason.clone()))
    }

    fn file(&mut self, path: &Path, named: bool) {
        self.files.push(Reached {
            path: path.to_owned(),
            real: path.canonicalize().unwrap_or_else(|_| path.to_owned()),
            named,
            link: is_symlink(path),
        });
    }

    /// A symlink whose target is missing, or which loops: what a loader would open is not
    /// there, so it is audited and fails, naming its target (probing says why).
    fn broken_link(&mut self, path: &Path) {
        self.found.checkpoints.push(Target::probe(path.to_owned()));
    }

    /// Skipped, with the link's target when the path is a symlink.
    fn skip(&mut self, path: &Path, rule: SkipRule, reason: String) {
        self.found.skipped.push(skipped(path, rule, reason));
    }

    /// Looks at each file once. Of the paths reaching one file, the one named on the command
    /// line is audited, else a symlink (the name a loader uses: a Hugging Face snapshot's
    /// `pytorch_model.bin`, not `blobs/<sha256>`), else the first; the others are skipped.
    fn finish(mut self) -> Discovered {
        let mut files = std::mem::take(&mut self.files);
        files.sort_by(|a, b| {
            (&a.real, !a.named, !a.link, &a.path).cmp(&(&b.real, !b.named, !b.link, &b.path))
        });
        let mut audited: Option<&Reached> = None;
        let mut looked_at = Vec::with_capacity(files.len());
        for file in &files {
            match audited {
                // The same path twice (named, and found in a named directory): once is enough.
                Some(first) if first.path == file.path => {}
                Some(first) if first.real == file.real => {
                    let reason = format!("same file as {}", first.path.display());
                    self.skip(&file.path, SkipRule::SameFile, reason)
                }
                _ => {
                    audited = Some(file);
                    looked_at.push(file);
                }
            }
        }
        // Probed side by side (as many at once as the run has threads, `--jobs`): a remote
        // file's first bytes are a request each, and a repository of a hundred shards waits
        // one round trip per thread rather than per file. Judged in order, as before.
        let probed: Vec<Target> = looked_at
            .par_iter()
            .map(|file| Target::probe(file.path.clone()))
            .collect();
        for (file, target) in looked_at.into_iter().zip(probed) {
            self.classify(file, target);
        }
        self.found
    }

    /// Audits a file that any loader accepts, or whose name says it was meant as a checkpoint;
    /// skips only what no loader accepts, with the rule that says so, whether the file was
    /// named on the command line or found in a walk. A file that cannot be looked at is
    /// audited, and fails saying why (fail closed).
    fn classify(&mut self, file: &Reached, target: Target) {
        let path = &file.path;
        let skipped = self.found.skipped.len();
        self.judge(path, target);
        if file.named && self.found.skipped.len() > skipped {
            self.found.named_skipped += 1;
        }
    }

    fn judge(&mut self, path: &Path, target: Target) {
        let meant_as_checkpoint = load::named_as_checkpoint(path);
        let named_as_index = path.to_string_lossy().ends_with(".index.json");
        match &target.probe {
            Ok(p)
                if p.sniffed() == Sniffed::JsonIndex && p.index().is_none() && !named_as_index =>
            {
                self.skip(
                    path,
                    SkipRule::NotAnIndex,
                    "JSON, not a checkpoint index".into(),
                )
            }
            Ok(p) if p.sniffed() != Sniffed::Unknown => self.found.checkpoints.push(target),
            _ if meant_as_checkpoint || named_as_index => self.found.checkpoints.push(target),
            Ok(_) => self.skip(
                path,
                SkipRule::NoLoader,
                "not a checkpoint: no loader accepts its bytes".into(),
            ),
            Err(tensorplay_engine::Error::Empty { .. }) => {
                self.skip(path, SkipRule::NoLoader, "not a checkpoint: empty".into())
            }
            Err(_) => self.found.checkpoints.push(target),
        }
    }
}

fn skipped(path: &Path, rule: SkipRule, reason: String) -> Skipped {
    let reason = match std::fs::read_link(path) {
        Ok(target) => format!("{reason} (symlink to {})", target.display()),
        Err(_) => reason,
    };
    Skipped {
        path: path.display().to_string(),
        reason,
        rule,
    }
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Why a path that is neither a file nor a directory is not read (reading a FIFO would block).
fn not_regular(meta: &std::fs::Metadata) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let ft = meta.file_type();
        let kind = if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_block_device() || ft.is_char_device() {
            "a device"
        } else {
            "a special file"
        };
        format!("not a regular file ({kind})")
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        "not a regular file".to_owned()
    }
}

/// Moves the checkpoints `tensorplay.toml` declares are not checkpoints (`[[ignore]]` with a
/// `reason` and no `rules`) to the skipped files, with the entry's reason; returns how many.
/// Named files too: a pre-commit hook names every staged file its patterns match.
pub fn skip_declared(found: &mut Discovered, config: &Config) -> usize {
    // A file the walk already passed over (a `.txt` beside the checkpoints) keeps the walk's
    // reason, which says what it is, but the entry that names it did match: no warning.
    for file in &found.skipped {
        let _ = config.skip_reason(&file.path);
    }
    let mut declared = 0;
    let mut kept = Vec::with_capacity(found.checkpoints.len());
    for target in std::mem::take(&mut found.checkpoints) {
        // Matched as the audit reports the path, as rule ignores are.
        match config.skip_reason(&target.path.display().to_string()) {
            Some(reason) => {
                declared += 1;
                found
                    .skipped
                    .push(skipped(&target.path, SkipRule::Declared, reason));
            }
            None => kept.push(target),
        }
    }
    found.checkpoints = kept;
    if declared > 0 {
        found.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    }
    declared
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
            Some((_, index)) if target.index().is_none() => found.skipped.push(skipped(
                &target.path,
                SkipRule::Shard,
                format!("shard of {index}"),
            )),
            _ => kept.push(target),
        }
    }
    found.checkpoints = kept;
}
