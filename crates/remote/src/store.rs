//! Objects of a cloud store (`s3://`, `az://`, `gs://`), through `object_store` with the cloud's
//! own credential chain and environment: one object, or every object under a prefix.

use crate::counted::{Counted, RangeRead};
use crate::retries::{self, Retries};
use crate::{gcs, Error, Options};
use futures_util::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::path::Path as StorePath;
use object_store::{ClientOptions, GetOptions, GetRange, ObjectStore, RetryConfig};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use tensorplay_engine::files::{self, RemoteError, RemoteObject};

/// The runtime that drives `object_store`'s requests for the blocking readers.
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("tensorplay-remote")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the remote reader: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Mounts `SCHEME://BUCKET/KEY` (one object) or `SCHEME://BUCKET/PREFIX` (every object under
/// it) of `s3://`, `az://` or `gs://` and returns the path to audit.
pub(crate) fn mount(arg: &str, options: &Options) -> Result<PathBuf, Error> {
    let refused = |reason: String| Error::Refused {
        path: arg.to_owned(),
        reason,
    };
    let store_error = |source| Error::Store {
        path: arg.to_owned(),
        source,
    };
    let (scheme, rest) = arg.split_once("://").unwrap_or(("", arg));
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(refused(format!(
            "expected {scheme}://BUCKET[/KEY-or-PREFIX]"
        )));
    }
    // The endpoints the environment sets obey the rule every URL does, before anything is
    // sent: (where it is set, the URL).
    let endpoints: Vec<(String, String)> = match scheme {
        "s3" => env_urls(&["AWS_ENDPOINT_URL", "AWS_ENDPOINT"]),
        "az" => env_urls(&["AZURE_STORAGE_ENDPOINT", "AZURITE_BLOB_STORAGE_URL"]),
        _ => gcs::endpoint().into_iter().collect(),
    };
    let cloud_allows_http = env_true(match scheme {
        "s3" => "AWS_ALLOW_HTTP",
        "az" => "AZURE_ALLOW_HTTP",
        _ => "GOOGLE_ALLOW_HTTP",
    });
    if !options.allow_http && !cloud_allows_http {
        if let Some((name, _)) = endpoints.iter().find(|(_, url)| plain_http_far(url)) {
            return Err(refused(format!(
                "{name} is plain http:// to a host that is not a loopback address; pass \
                 --allow-http (or set TENSORPLAY_ALLOW_HTTP=1) to read it unencrypted"
            )));
        }
    }
    let loopback = endpoints.iter().any(|(_, url)| plain_http_loopback(url));
    // Retries end within the request timeout, as those of https:// and hf:// reads do.
    let retry = RetryConfig {
        max_retries: 3,
        retry_timeout: options.timeout,
        ..RetryConfig::default()
    };
    let client = |allow_http: bool| {
        ClientOptions::new()
            .with_timeout(options.timeout)
            .with_allow_http(options.allow_http || allow_http)
    };
    // What the store fetches beyond ranges (listing pages, a HEAD) counts against the run's
    // limits; a refusal for one of them is kept to be returned as such.
    let counted = Counted::new(arg);
    // The client options given replace those `from_env` read: each cloud's own switch for
    // plain http is honoured here, and a loopback endpoint needs none.
    let store: Arc<dyn ObjectStore> = match scheme {
        "s3" => Arc::new(
            AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_client_options(client(loopback || cloud_allows_http))
                .with_http_connector(counted.clone())
                .with_retry(retry)
                .build()
                .map_err(|e| refused(e.to_string()))?,
        ),
        "az" => Arc::new(
            MicrosoftAzureBuilder::from_env()
                .with_container_name(bucket)
                .with_client_options(client(loopback || cloud_allows_http))
                .with_http_connector(counted.clone())
                .with_retry(retry)
                .build()
                .map_err(|e| refused(e.to_string()))?,
        ),
        "gs" => Arc::new(
            gcs::builder()
                .with_bucket_name(bucket)
                .with_client_options(client(loopback || cloud_allows_http))
                .with_http_connector(counted.clone())
                .with_retry(retry)
                .build()
                .map_err(|e| refused(e.to_string()))?,
        ),
        _ => {
            return Err(refused(format!(
                "{scheme}:// is not an object store tensorplay reads"
            )))
        }
    };
    let runtime = runtime().map_err(refused)?;
    let key = key.trim_end_matches('/');
    let root = PathBuf::from(format!("{scheme}://{bucket}"));
    let exact = StorePath::from(key);
    // A key names one object when it is one; otherwise it is a prefix.
    if !key.is_empty() {
        if let Ok(meta) = runtime.block_on(store.head(&exact)) {
            let path = root.join(key);
            mount_object(&store, path.clone(), meta);
            return Ok(path);
        }
    }
    let prefix = (!key.is_empty()).then_some(&exact);
    let max_objects = options.max_files;
    let listed: Vec<object_store::ObjectMeta> = runtime
        .block_on(async {
            let mut stream = store.list(prefix);
            let mut all = Vec::new();
            while let Some(meta) = stream.try_next().await? {
                if all.len() == max_objects {
                    return Ok(None);
                }
                all.push(meta);
            }
            Ok::<_, object_store::Error>(Some(all))
        })
        .map_err(|e| match counted.refusal().take() {
            Some(over) => Error::Budget(over),
            None => store_error(unreachable(&e)),
        })?
        .ok_or_else(|| {
            refused(format!(
                "more than {max_objects} objects under the prefix (--max-remote-files)"
            ))
        })?;
    if listed.is_empty() {
        return Err(refused("no object with that key or prefix".to_owned()));
    }
    for meta in listed {
        let path = root.join(meta.location.as_ref());
        mount_object(&store, path, meta);
    }
    Ok(if key.is_empty() { root } else { root.join(key) })
}

fn env_true(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The variables of `names` that are set, with their values.
fn env_urls(names: &[&str]) -> Vec<(String, String)> {
    names
        .iter()
        .filter_map(|name| Some((name.to_string(), std::env::var(name).ok()?)))
        .collect()
}

/// Whether `url` is plain http to a host that is not a loopback address.
fn plain_http_far(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        && !reqwest::Url::parse(url)
            .ok()
            .and_then(|url| url.host_str().map(crate::is_loopback))
            .unwrap_or(false)
}

/// Whether `url` is plain http to a loopback address, which is read without `--allow-http` as
/// any loopback URL is.
fn plain_http_loopback(url: &str) -> bool {
    url.strip_prefix("http://")
        .and_then(|rest| reqwest::Url::parse(&format!("http://{rest}")).ok())
        .and_then(|url| url.host_str().map(crate::is_loopback))
        .unwrap_or(false)
}

fn mount_object(store: &Arc<dyn ObjectStore>, path: PathBuf, meta: object_store::ObjectMeta) {
    files::mount(path.clone(), Arc::new(StoreObject::new(store, path, meta)));
}

#[derive(Debug)]
struct StoreObject {
    store: Arc<dyn ObjectStore>,
    location: StorePath,
    size: u64,
    /// The ETag the listing gave: every range must be of that version.
    etag: Option<String>,
    /// Where it is mounted, which its retries are charged to.
    path: PathBuf,
    /// Its range requests sent again after a failed attempt.
    retries: Retries,
}

impl StoreObject {
    fn new(store: &Arc<dyn ObjectStore>, path: PathBuf, meta: object_store::ObjectMeta) -> Self {
        StoreObject {
            store: Arc::clone(store),
            location: meta.location,
            size: meta.size,
            path,
            retries: Retries::default(),
            // A listing may give an ETag unquoted (Azure's does) where headers quote it.
            etag: meta
                .e_tag
                .map(|e| match e.starts_with('"') || e.starts_with("W/") {
                    true => e,
                    false => format!("\"{e}\""),
                }),
        }
    }
}

impl RemoteObject for StoreObject {
    fn size(&self) -> u64 {
        self.size
    }

    fn retries(&self) -> u64 {
        self.retries.count()
    }

    fn read_range(&self, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        let runtime = runtime().map_err(RemoteError::Unreachable)?;
        // Every attempt of this read carries the mark: the client charges those after the first.
        let read = RangeRead::new(self.path.clone(), self.retries.clone());
        let mut extensions = http::Extensions::new();
        extensions.insert(read.clone());
        let options = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: self.etag.clone(),
            extensions,
            ..GetOptions::default()
        };
        // A retry the run's limits refused is said as the limit, naming its flag.
        let failed = |e: object_store::Error| match read.refusal().take() {
            Some(refusal) => retries::over(refusal),
            None => match e {
                object_store::Error::Precondition { .. } => RemoteError::Inconsistent(
                    "the object changed while it was read (its ETag no longer matches)".to_owned(),
                ),
                e => unreachable(&e),
            },
        };
        runtime.block_on(async {
            let result = self
                .store
                .get_opts(&self.location, options)
                .await
                .map_err(failed)?;
            if result.range != range {
                return Err(RemoteError::Inconsistent(format!(
                    "asked for bytes {}..{}, answered with {}..{}",
                    range.start, range.end, result.range.start, result.range.end
                )));
            }
            let unquoted =
                |e: &Option<String>| e.as_deref().map(|e| e.trim_matches('"').to_owned());
            if result.meta.e_tag.is_some() && unquoted(&result.meta.e_tag) != unquoted(&self.etag) {
                return Err(RemoteError::Inconsistent(format!(
                    "the object changed while it was read (ETag {} became {})",
                    self.etag.as_deref().unwrap_or("none"),
                    result.meta.e_tag.as_deref().unwrap_or("none")
                )));
            }
            let bytes = result.bytes().await.map_err(failed)?;
            Ok(bytes.to_vec())
        })
    }
}

/// object_store's message, at most [`MAX_MESSAGE`] characters: it may quote what the store
/// sent (an object's name, up to 1 KiB each).
fn unreachable(error: &object_store::Error) -> RemoteError {
    let text = error.to_string();
    let mut message: String = text.chars().take(MAX_MESSAGE).collect();
    if message.len() < text.len() {
        message.push('…');
    }
    RemoteError::Unreachable(message)
}

const MAX_MESSAGE: usize = 600;
