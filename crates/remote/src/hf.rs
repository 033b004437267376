//! Hugging Face repositories: a revision resolved to its commit once, every file listed with
//! its size and read at that commit through `/resolve/`, as `huggingface_hub` reads them.

use crate::http::{send, Attempts, Deadline, Failure, HttpObject};
use crate::{Error, Options};
use reqwest::blocking::Client;
use reqwest::header::{self, HeaderMap, HeaderValue};
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tensorplay_engine::files::{self, RemoteError};

/// The largest answer of the API read (a revision, a page of a tree listing): the Hub lists
/// 1 000 entries a page, a few hundred KiB. Every answer also counts against
/// `--max-remote-bytes` and `--max-requests`, and is read no further than what is left of
/// them, so a listing never takes more than the budget and one page.
const MAX_ANSWER: u64 = 16 << 20;

#[derive(Deserialize)]
struct Revision {
    sha: String,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    path: String,
    #[serde(default)]
    size: u64,
    /// Present for a file stored in LFS: its content address.
    #[serde(default)]
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    /// The file's SHA-256, hex.
    oid: String,
}

/// `[datasets/]ORG/REPO[@REVISION][/PATH]`, parsed.
#[derive(Debug, PartialEq, Eq)]
struct RepoPath<'a> {
    /// `models` or `datasets`: the API's word for the repository type.
    kind: &'static str,
    repo: String,
    revision: &'a str,
    path: &'a str,
}

fn parse(rest: &str) -> Option<RepoPath<'_>> {
    let (kind, rest) = match rest.strip_prefix("datasets/") {
        Some(rest) => ("datasets", rest),
        None => ("models", rest),
    };
    let (org, rest) = rest.split_once('/')?;
    let (name, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (name, revision) = name.split_once('@').unwrap_or((name, "main"));
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars().any(|c| c != '.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    if !plain(org) || !plain(name) || revision.is_empty() || revision.contains(['?', '#']) {
        return None;
    }
    Some(RepoPath {
        kind,
        repo: format!("{org}/{name}"),
        revision,
        path: path.trim_end_matches('/'),
    })
}

/// Mounts every file of the repository at its resolved commit, under
/// `hf://[datasets/]ORG/REPO@SHA`, and returns that path joined with the one asked for.
pub(crate) fn mount(client: &Client, rest: &str, options: &Options) -> Result<PathBuf, Error> {
    let given = format!("hf://{rest}");
    let refused = |reason: String| Error::Refused {
        path: given.clone(),
        reason,
    };
    let repo = parse(rest)
        .ok_or_else(|| refused("expected hf://[datasets/]ORG/REPO[@REVISION][/PATH]".to_owned()))?;
    let endpoint = &options.hf_endpoint;
    let mut headers = HeaderMap::new();
    if let Some(token) = &options.hf_token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| refused("HF_TOKEN is not a valid header value".to_owned()))?;
        headers.insert(header::AUTHORIZATION, value);
    }
    let api = format!("{endpoint}/api/{}/{}", repo.kind, repo.repo);
    let api_get = Api {
        client,
        headers: &headers,
        path: Path::new(&given),
        options,
    };
    let revision: Revision = api_get.json(&format!("{api}/revision/{}", repo.revision))?;
    let sha = revision.sha;
    if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(refused(format!(
            "the Hub resolved the revision to '{}', not a commit",
            sha.escape_default()
        )));
    }
    let entries = api_get.list(&format!("{api}/tree/{sha}?recursive=true"))?;
    let prefix = if repo.kind == "datasets" {
        "datasets/"
    } else {
        ""
    };
    let root = PathBuf::from(format!("hf://{prefix}{}@{sha}", repo.repo));
    for entry in entries.iter().filter(|e| e.kind == "file") {
        let safe = entry
            .path
            .split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..");
        if !safe {
            return Err(refused(format!(
                "the Hub lists a file as '{}', which is not a relative path",
                entry.path.escape_default()
            )));
        }
        let url = format!(
            "{endpoint}/{prefix}{}/resolve/{sha}/{}",
            repo.repo, entry.path
        );
        let sha256 = match &entry.lfs {
            Some(lfs) => Some(hex32(&lfs.oid).ok_or_else(|| {
                refused(format!(
                    "the Hub lists '{}' with lfs.oid '{}', which is not a SHA-256",
                    entry.path.escape_default(),
                    lfs.oid.escape_default()
                ))
            })?),
            None => None,
        };
        let object = HttpObject::listed(
            client,
            &url,
            entry.size,
            headers.clone(),
            options.timeout,
            sha256,
        );
        files::mount(root.join(&entry.path), Arc::new(object));
    }
    let path = if repo.path.is_empty() {
        root.clone()
    } else {
        root.join(repo.path)
    };
    if !files::is_remote(&path) {
        return Err(refused(format!(
            "no file or folder '{}' at commit {sha}",
            repo.path.escape_default()
        )));
    }
    Ok(path)
}

/// The Hub's API, each answer counted against the run's remote budget.
struct Api<'a> {
    client: &'a Client,
    headers: &'a HeaderMap,
    /// The path as given, named in refusals.
    path: &'a Path,
    options: &'a Options,
}

impl Api<'_> {
    /// Every entry of a tree listing, following its `Link: <…>; rel="next"` pages, up to
    /// `--max-remote-files` entries.
    fn list(&self, first: &str) -> Result<Vec<Entry>, Error> {
        let mut entries = Vec::new();
        let mut next = Some(first.to_owned());
        // Each page is a request within --max-requests: that bounds the pages followed.
        while let Some(url) = next.take() {
            let response = self.get(&url)?;
            next = response
                .headers()
                .get(header::LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(next_link);
            let page: Vec<Entry> = self.read_json(response, &url)?;
            let max = self.options.max_files;
            if page.len() > max.saturating_sub(entries.len()) {
                return Err(Error::Refused {
                    path: self.path.display().to_string(),
                    reason: format!(
                        "the repository lists more than {max} files and folders \
                         (--max-remote-files); audit a folder of it, or raise the limit"
                    ),
                });
            }
            entries.extend(page);
        }
        Ok(entries)
    }

    fn json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, Error> {
        let response = self.get(url)?;
        self.read_json(response, url)
    }

    /// One request, counted before it is sent.
    fn get(&self, url: &str) -> Result<reqwest::blocking::Response, Error> {
        files::charge(self.path, 1, 0).map_err(Error::Budget)?;
        let deadline = Deadline::start(self.options.timeout);
        let attempts = Attempts::new(self.path, None);
        send(&deadline, &attempts, || {
            self.client.get(url).headers(self.headers.clone())
        })
        .map_err(|failure| match failure {
            Failure::Budget(over) => Error::Budget(over),
            Failure::Remote(source) => self.store(at(url)(source)),
        })
    }

    /// The answer's body, read no further than what the run may still fetch (and one byte
    /// more, to tell that it ran past), then counted.
    fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        response: reqwest::blocking::Response,
        url: &str,
    ) -> Result<T, Error> {
        let cap = MAX_ANSWER.min(files::bytes_left());
        let mut body = Vec::new();
        let read = response.take(cap.saturating_add(1)).read_to_end(&mut body);
        files::charge(self.path, 0, body.len() as u64).map_err(Error::Budget)?;
        read.map_err(|e| self.store(RemoteError::Unreachable(format!("{url}: {e}"))))?;
        if body.len() as u64 > MAX_ANSWER {
            return Err(self.store(RemoteError::Unreachable(format!(
                "{url}: an answer larger than {MAX_ANSWER} bytes"
            ))));
        }
        serde_json::from_slice(&body).map_err(|e| {
            self.store(RemoteError::Unreachable(format!(
                "{url}: not the Hub's JSON: {e}"
            )))
        })
    }

    fn store(&self, source: RemoteError) -> Error {
        Error::Store {
            path: self.path.display().to_string(),
            source,
        }
    }
}

/// The error, naming the API URL it came from.
fn at(url: &str) -> impl Fn(RemoteError) -> RemoteError + '_ {
    move |error| match error {
        RemoteError::Unreachable(detail) => RemoteError::Unreachable(format!("{url}: {detail}")),
        RemoteError::Inconsistent(detail) => RemoteError::Inconsistent(format!("{url}: {detail}")),
        over @ RemoteError::Budget { .. } => over,
    }
}

/// 64 hex digits as 32 bytes.
fn hex32(hex: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    // Digits only: from_str_radix would also take a sign.
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

/// The `rel="next"` target of a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                target
                    .trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned()
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_paths_parse_as_the_hub_names_them() {
        let p = parse("org/model@v1.0/sub/model.safetensors").unwrap();
        assert_eq!(
            (p.kind, p.repo.as_str(), p.revision, p.path),
            ("models", "org/model", "v1.0", "sub/model.safetensors")
        );
        let p = parse("datasets/org/data").unwrap();
        assert_eq!((p.kind, p.revision, p.path), ("datasets", "main", ""));
        assert!(parse("org").is_none());
        assert!(parse("org/../x").is_none());
        assert!(parse("org/name@").is_none());
    }

    #[test]
    fn the_next_page_is_the_link_marked_next() {
        let link = r#"<https://h/api/models/a/b/tree/x?cursor=abc>; rel="next", <https://h/p>; rel="prev""#;
        assert_eq!(
            next_link(link).as_deref(),
            Some("https://h/api/models/a/b/tree/x?cursor=abc")
        );
        assert_eq!(next_link(r#"<https://h/p>; rel="prev""#), None);
    }

    #[test]
    fn an_lfs_oid_is_read_as_sixty_four_hex_digits_only() {
        let oid = "00ff".repeat(16);
        assert_eq!(hex32(&oid).map(|d| (d[0], d[1])), Some((0x00, 0xff)));
        assert!(hex32(&oid[1..]).is_none());
        assert!(hex32(&format!("{}zz", &oid[2..])).is_none());
        assert!(hex32(&format!("+f{}", &oid[2..])).is_none());
    }
}
