//! The local model directory serialised again with the signed parameters, as a verifier of
//! the OMS format does: every file (or shard) hashed, the ignored paths left out, and the
//! result compared with the signed resources.

use super::statement::{hex, Hash, Method, Resource, Serialization};
use super::Failure;
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Paths every verifier leaves out by default (`model_signing`'s `ignore_git_paths`).
pub const GIT_PATHS: [&str; 4] = [".git", ".gitattributes", ".github", ".gitignore"];

/// Every regular file under `dir`, as its path relative to `dir` with `/` separators, in
/// sorted order; `Err` names a symbolic link when `allow_symlinks` is false, and anything
/// that is neither a file nor a directory (as `model_signing` refuses them).
pub fn files(dir: &Path, allow_symlinks: bool) -> Result<Vec<(String, PathBuf)>, Failure> {
    let mut out = Vec::new();
    let mut pending = vec![(String::new(), dir.to_path_buf())];
    while let Some((prefix, path)) = pending.pop() {
        let entries = fs::read_dir(&path)
            .map_err(|e| Failure::Unreadable(format!("cannot list {}: {e}", path.display())))?;
        for entry in entries {
            let entry = entry
                .map_err(|e| Failure::Unreadable(format!("cannot list {}: {e}", path.display())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let full = entry.path();
            let meta = fs::symlink_metadata(&full)
                .map_err(|e| Failure::Unreadable(format!("cannot read {}: {e}", full.display())))?;
            if meta.file_type().is_symlink() {
                if !allow_symlinks {
                    return Err(Failure::Mismatch(vec![format!(
                        "{rel}: a symbolic link, which the signature's serialization does not allow"
                    )]));
                }
                // Followed to a file; a link to a directory is not walked into.
                if fs::metadata(&full).map(|m| m.is_file()).unwrap_or(false) {
                    out.push((rel, full));
                }
            } else if meta.is_dir() {
                pending.push((rel, full));
            } else if meta.is_file() {
                out.push((rel, full));
            } else {
                return Err(Failure::Mismatch(vec![format!(
                    "{rel}: neither a file nor a directory"
                )]));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Whether `rel` is `ignored` or lies under it.
pub fn under(rel: &str, ignored: &str) -> bool {
    let ignored = ignored.trim_end_matches('/');
    let ignored = ignored.strip_prefix("./").unwrap_or(ignored);
    !ignored.is_empty()
        && (rel == ignored
            || rel
                .strip_prefix(ignored)
                .is_some_and(|r| r.starts_with('/')))
}

/// The resources of the files under `dir` with `serialization`, leaving out its ignored
/// paths and `also_ignored`, keyed by name.
pub fn serialise(
    dir: &Path,
    serialization: &Serialization,
    also_ignored: &[String],
) -> Result<BTreeMap<String, Resource>, Failure> {
    let mut out = BTreeMap::new();
    for (rel, path) in files(dir, serialization.allow_symlinks)? {
        let ignored = serialization
            .ignore_paths
            .iter()
            .chain(also_ignored)
            .any(|i| under(&rel, i));
        if ignored {
            continue;
        }
        let read = |e: std::io::Error| Failure::Unreadable(format!("cannot read {rel}: {e}"));
        let mut file = fs::File::open(&path).map_err(read)?;
        let size = file.metadata().map_err(read)?.len();
        for r in resources_of(&rel, &mut file, size, serialization).map_err(read)? {
            out.insert(r.name.clone(), r);
        }
    }
    Ok(out)
}

/// The resources of one file of `size` bytes named `rel`, read from `reader`: one for the
/// `files` method, one per shard for `shards`. Shared by every source of files (a local
/// directory, a remote repository read whole).
pub fn resources_of(
    rel: &str,
    reader: &mut impl Read,
    size: u64,
    serialization: &Serialization,
) -> std::io::Result<Vec<Resource>> {
    let mut out = Vec::new();
    match serialization.method {
        Method::Files => {
            let digest = digest_of(reader, serialization.hash, None)?;
            let algorithm = serialization.hash.digest_name().to_owned();
            out.push(resource(rel.to_owned(), algorithm, digest));
        }
        Method::Shards { shard_size } => {
            // A shard's digest is named for its hash and the shard size.
            let algorithm = format!("{}-sharded-{shard_size}", serialization.hash.digest_name());
            let mut start = 0u64;
            while start < size {
                let end = start.saturating_add(shard_size).min(size);
                let digest = digest_of(reader, serialization.hash, Some(end - start))?;
                let name = format!("{rel}:{start}:{end}");
                out.push(resource(name, algorithm.clone(), digest));
                start = end;
            }
        }
    }
    Ok(out)
}

fn resource(name: String, algorithm: String, digest: Vec<u8>) -> Resource {
    Resource {
        name,
        algorithm,
        digest: hex(&digest),
    }
}

/// The digest of the next `len` bytes of `file` (all of it when `None`), read in blocks.
fn digest_of(file: &mut impl Read, hash: Hash, len: Option<u64>) -> std::io::Result<Vec<u8>> {
    use sha2::Digest as _;
    let mut sha = sha2::Sha256::new();
    let mut b2 = blake2::Blake2b512::new();
    let mut b3 = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    loop {
        let want = match left {
            Some(0) => break,
            Some(n) => n.min(buf.len() as u64) as usize,
            None => buf.len(),
        };
        let n = file.read(&mut buf[..want])?;
        if n == 0 {
            if left.is_some() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file shrank while it was read",
                ));
            }
            break;
        }
        let chunk = &buf[..n];
        match hash {
            Hash::Sha256 => sha.update(chunk),
            Hash::Blake2 => blake2::Digest::update(&mut b2, chunk),
            Hash::Blake3 => {
                b3.update(chunk);
            }
        }
        if let Some(l) = left.as_mut() {
            *l -= n as u64;
        }
    }
    Ok(match hash {
        Hash::Sha256 => sha.finalize().to_vec(),
        Hash::Blake2 => blake2::Digest::finalize(b2).to_vec(),
        Hash::Blake3 => b3.finalize().as_bytes().to_vec(),
    })
}

/// What differs between the signed resources and the local ones, one line per name: signed
/// but missing, present but unsigned, or another digest.
pub fn compare(signed: &[Resource], local: &BTreeMap<String, Resource>) -> Vec<String> {
    let mut differences = Vec::new();
    let mut signed_names = BTreeMap::new();
    for r in signed {
        if signed_names.insert(r.name.as_str(), r).is_some() {
            differences.push(format!("{}: listed twice in the signed manifest", r.name));
        }
    }
    for (name, r) in &signed_names {
        match local.get(*name) {
            None => differences.push(format!("{name}: signed, but missing from the model")),
            Some(l) if l.algorithm != r.algorithm || l.digest != r.digest => {
                differences.push(format!(
                    "{name}: changed since it was signed ({} {} signed, {} {} now)",
                    r.algorithm, r.digest, l.algorithm, l.digest
                ))
            }
            Some(_) => {}
        }
    }
    for name in local.keys() {
        if !signed_names.contains_key(name.as_str()) {
            differences.push(format!("{name}: not covered by the signature"));
        }
    }
    differences
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_paths_cover_what_lies_under_them_only() {
        assert!(under(".git/config", ".git"));
        assert!(under(".git", ".git/"));
        assert!(under("model.sig", "model.sig"));
        assert!(!under(".gitignore-not", ".gitignore"));
        assert!(!under("a/.git/x", ".git"));
        assert!(!under("x", ""));
    }

    #[test]
    fn blake2_is_blake2b_512_and_blake3_is_blake3() {
        let dir = std::env::temp_dir().join(format!("tp-sig-hash-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("abc");
        fs::write(&path, b"abc").unwrap();
        let mut f = fs::File::open(&path).unwrap();
        let b2 = hex(&digest_of(&mut f, Hash::Blake2, None).unwrap());
        // RFC 7693, appendix A.
        assert!(b2.starts_with("ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"));
        let mut f = fs::File::open(&path).unwrap();
        let b3 = hex(&digest_of(&mut f, Hash::Blake3, None).unwrap());
        assert_eq!(
            b3,
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn differences_name_each_file() {
        let r = |name: &str, digest: &str| Resource {
            name: name.into(),
            algorithm: "sha256".into(),
            digest: digest.into(),
        };
        let signed = [r("a", "00"), r("b", "11")];
        let local: BTreeMap<_, _> = [
            ("b".to_owned(), r("b", "12")),
            ("c".to_owned(), r("c", "22")),
        ]
        .into_iter()
        .collect();
        let diff = compare(&signed, &local);
        assert_eq!(diff.len(), 3, "{diff:?}");
        assert!(diff[0].starts_with("a: signed, but missing"));
        assert!(diff[1].starts_with("b: changed"));
        assert!(diff[2].starts_with("c: not covered"));
    }
}
