//! Hugging Face repositories: a revision resolved to its commit once, every file listed with
//! its size and read at that commit through `/resolve/`, as `huggingface_hub` reads them.

use crate::http::{send, HttpObject};
use crate::{Error, Options};
use reqwest::blocking::Client;
use reqwest::header::{self, HeaderMap, HeaderValue};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use tensorplay_engine::files::{self, RemoteError};

/// Pages of a tree listing followed at most (the Hub lists 1 000 entries a page).
const MAX_PAGES: usize = 1000;
/// The largest listing answer read.
const MAX_ANSWER: u64 = 64 << 20;

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
    let store = |source| Error::Store {
        path: given.clone(),
        source,
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
    let revision: Revision = get_json(
        client,
        &format!("{api}/revision/{}", repo.revision),
        &headers,
    )
    .map_err(store)?;
    let sha = revision.sha;
    if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(refused(format!(
            "the Hub resolved the revision to '{}', not a commit",
            sha.escape_default()
        )));
    }
    let entries = list(
        client,
        &format!("{api}/tree/{sha}?recursive=true"),
        &headers,
    )
    .map_err(store)?;
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
        let object = HttpObject::listed(client, &url, entry.size, headers.clone());
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
            repo.path
        )));
    }
    Ok(path)
}

/// Every entry of a tree listing, following its `Link: <…>; rel="next"` pages.
fn list(client: &Client, first: &str, headers: &HeaderMap) -> Result<Vec<Entry>, RemoteError> {
    let mut entries = Vec::new();
    let mut next = Some(first.to_owned());
    for _ in 0..MAX_PAGES {
        let Some(url) = next.take() else {
            return Ok(entries);
        };
        let response = send(|| client.get(&url).headers(headers.clone())).map_err(at(&url))?;
        next = response
            .headers()
            .get(header::LINK)
            .and_then(|v| v.to_str().ok())
            .and_then(next_link);
        entries.extend(read_json::<Vec<Entry>>(response, &url)?);
    }
    Err(RemoteError::Unreachable(format!(
        "{first}: more than {MAX_PAGES} pages of files"
    )))
}

fn get_json<T: serde::de::DeserializeOwned>(
    client: &Client,
    url: &str,
    headers: &HeaderMap,
) -> Result<T, RemoteError> {
    let response = send(|| client.get(url).headers(headers.clone())).map_err(at(url))?;
    read_json(response, url)
}

/// The error, naming the API URL it came from.
fn at(url: &str) -> impl Fn(RemoteError) -> RemoteError + '_ {
    move |error| match error {
        RemoteError::Unreachable(detail) => RemoteError::Unreachable(format!("{url}: {detail}")),
        RemoteError::Inconsistent(detail) => RemoteError::Inconsistent(format!("{url}: {detail}")),
    }
}

fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::blocking::Response,
    url: &str,
) -> Result<T, RemoteError> {
    use std::io::Read;
    let mut body = Vec::new();
    response
        .take(MAX_ANSWER + 1)
        .read_to_end(&mut body)
        .map_err(|e| RemoteError::Unreachable(format!("{url}: {e}")))?;
    if body.len() as u64 > MAX_ANSWER {
        return Err(RemoteError::Unreachable(format!(
            "{url}: answer larger than {MAX_ANSWER} bytes"
        )));
    }
    serde_json::from_slice(&body)
        .map_err(|e| RemoteError::Unreachable(format!("{url}: not the Hub's JSON: {e}")))
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
}
