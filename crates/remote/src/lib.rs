//! Checkpoints where they are stored: an `https://` URL, a Hugging Face repository
//! (`hf://ORG/REPO[@REVISION][/PATH]`), an S3, Azure Blob Storage or Google Cloud Storage object
//! or prefix (`s3://BUCKET/KEY`, `az://CONTAINER/KEY`, `gs://BUCKET/KEY`) is mounted as paths of the engine's read layer
//! (`tensorplay_engine::files`), whose readers then fetch only the byte ranges they read.
//!
//! This crate resolves and lists; it reads nothing itself but what a listing needs.

mod counted;
mod error_body;
mod gcs;
mod hf;
mod http;
mod retries;
mod store;

use reqwest::blocking::Client;
use reqwest::header::HeaderMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tensorplay_engine::files::{self, RemoteError};

/// How remote paths are reached.
#[derive(Debug, Clone)]
pub struct Options {
    /// Whether plain `http://` may be used beyond loopback addresses.
    pub allow_http: bool,
    /// The longest one request may take.
    pub timeout: Duration,
    /// The Hugging Face endpoint (`HF_ENDPOINT`), without a trailing slash.
    pub hf_endpoint: String,
    /// The Hugging Face token (`HF_TOKEN`), sent only to the endpoint.
    pub hf_token: Option<String>,
    /// Entries a listing (a Hub tree, an S3, Azure or GCS prefix) may hold, at most.
    pub max_files: usize,
}

impl Options {
    /// The options the environment sets: `HF_ENDPOINT`, `HF_TOKEN` (as `huggingface_hub`
    /// reads them), `TENSORPLAY_ALLOW_HTTP=1`.
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Options {
            allow_http: var("TENSORPLAY_ALLOW_HTTP").is_some_and(|v| v == "1"),
            timeout: Duration::from_secs(60),
            hf_endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| "https://huggingface.co".to_owned())
                .trim_end_matches('/')
                .to_owned(),
            hf_token: var("HF_TOKEN"),
            max_files: 10_000,
        }
    }
}

/// Why a remote path could not be mounted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not a remote path tensorplay can reach, or one it may not (plain http).
    #[error("{path}: {reason}")]
    Refused {
        /// The path as given.
        path: String,
        /// Why.
        reason: String,
    },
    /// The store could not be read or answered what cannot be right.
    #[error("{path}: {source}")]
    Store {
        /// The path as given.
        path: String,
        /// What the store said.
        source: RemoteError,
    },
    /// Listing it would pass the run's remote budget (`--max-remote-bytes`, `--max-requests`).
    #[error(transparent)]
    Budget(tensorplay_engine::Error),
}

/// Whether `arg` names a remote path (a URL scheme tensorplay knows, reachable or not).
pub fn is_remote(arg: &str) -> bool {
    SCHEMES.iter().any(|s| arg.starts_with(s))
}

const SCHEMES: &[&str] = &[
    "https://", "http://", "hf://", "s3://", "gs://", "az://", "abfs://",
];

/// Mounts what `arg` names and returns the path to audit (a file, or a directory of the
/// repository's files); `None` when `arg` is a local path.
pub fn mount(arg: &str, options: &Options) -> Result<Option<PathBuf>, Error> {
    if !is_remote(arg) {
        return Ok(None);
    }
    let refused = |reason: &str| Error::Refused {
        path: arg.to_owned(),
        reason: reason.to_owned(),
    };
    let store = |source| Error::Store {
        path: arg.to_owned(),
        source,
    };
    let client = client(options).map_err(|e| refused(&e))?;
    if let Some(rest) = arg.strip_prefix("hf://") {
        check_scheme(&options.hf_endpoint, options)
            .map_err(|e| refused(&format!("HF_ENDPOINT: {e}")))?;
        return hf::mount(&client, rest, options).map(Some);
    }
    if arg.starts_with("http://") || arg.starts_with("https://") {
        check_scheme(arg, options).map_err(|e| refused(&e))?;
        // Its HEAD is a request of the run, counted before it is sent as an S3 or Azure
        // key's HEAD is: everything a server is asked counts against --max-requests.
        files::charge(Path::new(arg), 1, 0).map_err(Error::Budget)?;
        let object = http::HttpObject::open(&client, arg, HeaderMap::new(), options.timeout)
            .map_err(|failure| match failure {
                http::Failure::Budget(over) => Error::Budget(over),
                http::Failure::Remote(source) => store(source),
            })?;
        let path = PathBuf::from(arg);
        files::mount(path.clone(), Arc::new(object));
        return Ok(Some(path));
    }
    if ["s3://", "az://", "gs://"]
        .iter()
        .any(|s| arg.starts_with(s))
    {
        return store::mount(arg, options).map(Some);
    }
    Err(refused(
        "abfs:// paths are not supported yet; use az://CONTAINER/KEY for Azure Blob Storage",
    ))
}

/// Plain `http://` only to a loopback address, unless allowed; no other scheme at all.
fn check_scheme(url: &str, options: &Options) -> Result<(), String> {
    if url.starts_with("https://") || options.allow_http {
        return Ok(());
    }
    if !url.starts_with("http://") {
        return Err("not an http:// or https:// URL".to_owned());
    }
    let host = reqwest::Url::parse(url)
        .map_err(|e| format!("not a URL: {e}"))?
        .host_str()
        .unwrap_or_default()
        .to_owned();
    if is_loopback(&host) {
        return Ok(());
    }
    Err(
        "plain http:// is used only for loopback addresses; pass --allow-http (or set \
         TENSORPLAY_ALLOW_HTTP=1) to read it unencrypted"
            .to_owned(),
    )
}

pub(crate) fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A client that follows a redirect to https, or to plain http on a loopback address only
/// (the rule for every URL), unless plain http is allowed.
fn client(options: &Options) -> Result<Client, String> {
    let allow_http = options.allow_http;
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > 10 {
            return attempt.error("more than 10 redirects");
        }
        let to = attempt.url();
        let host = to.host_str().unwrap_or_default().to_owned();
        if to.scheme() == "https" || allow_http || (to.scheme() == "http" && is_loopback(&host)) {
            attempt.follow()
        } else {
            // The host only: a redirect's query may carry a signature.
            let scheme = to.scheme().to_owned();
            attempt.error(format!(
                "redirected to plain {scheme}://{host}/…, which is used only for loopback \
                 addresses; pass --allow-http to follow it"
            ))
        }
    });
    Client::builder()
        .redirect(policy)
        .timeout(options.timeout)
        .user_agent(concat!("tensorplay/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| e.to_string())
}
