//! A model directory of a remote repository (an `hf://` one, mounted in the engine's read
//! layer) checked against its signature: the signature fetched whole and verified as a local
//! one is, then the repository's listing compared with the signed manifest. With the `files`
//! method and sha256, a file the Hub stores in LFS is compared by the SHA-256 its listing
//! gives (`lfs.oid`) without fetching it: the result trusts the Hub's content addressing.
//! Every other file, and every file under `--deep` or another method or hash, is fetched whole
//! (within `--max-remote-bytes`) and hashed.

use super::statement::{hex, Hash, Method, Resource};
use super::{
    conclude, conclude_comparison, local, verify_envelope, Failure, Outcome, Request,
    SignatureFacts, DIGESTS_HASHED, DIGESTS_HUB_LFS_OID,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use tensorplay_engine::files;

/// `request` verified for a remote model directory; `deep` hashes every byte of every file
/// rather than trusting the Hub's listed SHA-256 of LFS files.
pub fn verify(request: &Request, deep: bool) -> Outcome {
    conclude(request, |facts| run(request, deep, facts))
}

fn run(request: &Request, deep: bool, facts: &mut SignatureFacts) -> Result<(), Failure> {
    let bytes = read_signature(request)?;
    let manifest = verify_envelope(&bytes, &request.trust, facts)?;
    let serialization = &manifest.serialization;
    let signature_rel = relative(&request.model, &request.signature);
    // Only whole files hashed with SHA-256 are what an lfs.oid addresses.
    let by_oid =
        !deep && serialization.method == Method::Files && serialization.hash == Hash::Sha256;
    let mut listed = BTreeMap::new();
    let mut from_oid = BTreeSet::new();
    for object in files::listed_under(&request.model) {
        let Some(rel) = relative(&request.model, &object.path) else {
            continue;
        };
        let ignored = serialization
            .ignore_paths
            .iter()
            .map(String::as_str)
            .chain(local::GIT_PATHS)
            .chain(signature_rel.as_deref())
            .any(|i| local::under(&rel, i));
        if ignored {
            continue;
        }
        match object.sha256 {
            Some(oid) if by_oid => {
                let resource = Resource {
                    name: rel.clone(),
                    algorithm: Hash::Sha256.digest_name().to_owned(),
                    digest: hex(&oid),
                };
                listed.insert(rel.clone(), resource);
                from_oid.insert(rel);
            }
            _ => {
                // A file outside LFS is listed with a git blob id (SHA-1 of a header and the
                // content), which no signed digest is: it is fetched and hashed.
                let bytes = files::read_whole(&object.path).map_err(|e| {
                    Failure::Unreadable(format!("{rel} could not be fetched to hash it: {e}"))
                })?;
                let resources = local::resources_of(
                    &rel,
                    &mut bytes.as_slice(),
                    bytes.len() as u64,
                    serialization,
                )
                .map_err(|e| Failure::Unreadable(format!("cannot hash {rel}: {e}")))?;
                for r in resources {
                    listed.insert(r.name.clone(), r);
                }
            }
        }
    }
    facts.digests = Some(
        if from_oid.is_empty() {
            DIGESTS_HASHED
        } else {
            DIGESTS_HUB_LFS_OID
        }
        .to_owned(),
    );
    let mut differences = local::compare(&manifest.resources, &listed);
    for line in &mut differences {
        let named = line
            .split_once(": changed since it was signed")
            .is_some_and(|(name, _)| from_oid.contains(name));
        if named {
            line.push_str(", as the Hub lists it (lfs.oid)");
        }
    }
    conclude_comparison(&manifest, differences, facts)
}

/// The signature's bytes: fetched whole when the repository lists it, read locally when it
/// is a local file (`--signature`); absent from the repository, unsigned.
fn read_signature(request: &Request) -> Result<Vec<u8>, Failure> {
    let signature = &request.signature;
    if files::stats(signature).is_some() {
        return files::read_whole(signature)
            .map_err(|e| Failure::Invalid(format!("cannot fetch the signature: {e}")));
    }
    if signature.starts_with(&request.model) {
        return Err(Failure::Unsigned(format!(
            "{} has no signature: the repository lists no {}",
            request.model.display(),
            signature
                .strip_prefix(&request.model)
                .unwrap_or(signature)
                .display()
        )));
    }
    std::fs::read(signature).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Failure::Unsigned(format!(
            "{} has no signature: {} does not exist",
            request.model.display(),
            signature.display()
        )),
        _ => Failure::Invalid(format!("cannot read {}: {e}", signature.display())),
    })
}

/// `path` relative to `dir` with `/` separators, when it lies under it.
fn relative(dir: &Path, path: &Path) -> Option<String> {
    let rest = path.strip_prefix(dir).ok()?;
    let parts: Vec<String> = rest
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}
