//! One object behind an HTTP(S) URL, read by `Range` requests that must be answered exactly.

use crate::error_body::{self, MAX_ERROR_BODY};
use crate::retries::{self, Retries};
use reqwest::blocking::{Client, Response};
use reqwest::header::{self, HeaderMap};
use reqwest::StatusCode;
use std::cell::Cell;
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tensorplay_engine::files::{self, RemoteError, RemoteObject};

/// Attempts at one request when the store is briefly unavailable (429, 5xx, a broken transfer).
const ATTEMPTS: u32 = 4;
/// The longest wait a `Retry-After` is honoured for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// An HTTP(S) object of known length, pinned to the validator it was first seen with.
#[derive(Debug)]
pub(crate) struct HttpObject {
    client: Client,
    url: String,
    len: u64,
    /// The object's strong ETag when first seen (none if the server gives none): every later
    /// answer must carry it.
    etag: OnceLock<Option<String>>,
    headers: HeaderMap,
    /// `--request-timeout`: the longest one range read may take, retries included.
    timeout: Duration,
    /// The SHA-256 the listing gives (a Hub file's `lfs.oid`).
    sha256: Option<[u8; 32]>,
    /// Its range requests sent again after a failed attempt.
    retries: Retries,
}

impl HttpObject {
    /// The object at `url` of the length a listing gave.
    pub(crate) fn listed(
        client: &Client,
        url: &str,
        len: u64,
        headers: HeaderMap,
        timeout: Duration,
        sha256: Option<[u8; 32]>,
    ) -> Self {
        HttpObject {
            client: client.clone(),
            url: url.to_owned(),
            len,
            etag: OnceLock::new(),
            headers,
            timeout,
            sha256,
            retries: Retries::default(),
        }
    }

    /// The object at `url`, its length and validator from a `HEAD`.
    pub(crate) fn open(
        client: &Client,
        url: &str,
        headers: HeaderMap,
        timeout: Duration,
    ) -> Result<Self, Failure> {
        let deadline = Deadline::start(timeout);
        let attempts = Attempts::new(Path::new(url), None);
        let response = send(&deadline, &attempts, || {
            client.head(url).headers(headers.clone())
        })?;
        let len = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| {
                RemoteError::Unreachable("the server gives no length for the object".to_owned())
            })?;
        let object = HttpObject::listed(client, url, len, headers, timeout, None);
        let _ = object.etag.set(strong_etag(response.headers()));
        Ok(object)
    }

    fn get(&self, range: &Range<u64>) -> Result<Vec<u8>, Failure> {
        let want = range.end - range.start;
        let deadline = Deadline::start(self.timeout);
        // The read layer charged the first attempt; a body cut short is asked for again.
        let attempts = Attempts::new(Path::new(&self.url), Some(&self.retries));
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            if deadline.left().is_none() {
                return Err(deadline.passed(&last).into());
            }
            let response = send(&deadline, &attempts, || {
                let mut request = self
                    .client
                    .get(&self.url)
                    .headers(self.headers.clone())
                    .header(
                        header::RANGE,
                        format!("bytes={}-{}", range.start, range.end - 1),
                    );
                if let Some(Some(etag)) = self.etag.get() {
                    request = request.header(header::IF_MATCH, etag);
                }
                request
            })?;
            self.check_answer(&response, range)?;
            let mut body = Vec::new();
            // One byte more than asked for, to tell a long body from an exact one. The body
            // ends with the request's deadline, however slowly it comes.
            match response.take(want + 1).read_to_end(&mut body) {
                Ok(_) if body.len() as u64 == want => return Ok(body),
                Ok(_) if body.len() as u64 > want => {
                    return Err(RemoteError::Inconsistent(format!(
                        "answered bytes {}..{} with more bytes than asked for",
                        range.start, range.end
                    ))
                    .into())
                }
                result => {
                    // Bytes of a failed attempt were fetched all the same.
                    attempts.received(body.len() as u64)?;
                    let why = result.err().map(|e| format!(" ({e})")).unwrap_or_default();
                    last = format!(
                        "bytes {}..{}: the body ended after {} of {want} bytes{why}",
                        range.start,
                        range.end,
                        body.len()
                    )
                }
            }
        }
        Err(RemoteError::Unreachable(last).into())
    }

    /// A range answer is `206` with the range asked for, of this object, in this version.
    fn check_answer(&self, response: &Response, range: &Range<u64>) -> Result<(), RemoteError> {
        if response.status() == StatusCode::OK {
            // The whole object for a range: reading it is what range reads exist to avoid.
            return Err(RemoteError::Unreachable(
                "the server answered a range request with the whole object (200, not 206): \
                 it does not serve byte ranges"
                    .to_owned(),
            ));
        }
        if response.status() != StatusCode::PARTIAL_CONTENT {
            return Err(RemoteError::Unreachable(format!(
                "HTTP {} for bytes {}..{}",
                response.status(),
                range.start,
                range.end
            )));
        }
        let expected = format!("bytes {}-{}/{}", range.start, range.end - 1, self.len);
        let got = response
            .headers()
            .get(header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if got != expected {
            return Err(RemoteError::Inconsistent(format!(
                "asked for {expected}, answered with '{}'",
                got.escape_default()
            )));
        }
        let now = strong_etag(response.headers());
        if let Some(first) = self.etag.get_or_init(|| now.clone()) {
            if now.as_ref() != Some(first) {
                let now = now.as_deref().unwrap_or("none");
                return Err(RemoteError::Inconsistent(format!(
                    "the object changed while it was read (ETag {first} became {now})"
                )));
            }
        }
        Ok(())
    }
}

impl RemoteObject for HttpObject {
    fn size(&self) -> u64 {
        self.len
    }

    fn read_range(&self, range: Range<u64>) -> Result<Vec<u8>, RemoteError> {
        self.get(&range).map_err(Failure::into_remote)
    }

    fn listed_sha256(&self) -> Option<[u8; 32]> {
        self.sha256
    }

    fn retries(&self) -> u64 {
        self.retries.count()
    }
}

/// The end of one request's whole exchange: connecting, the headers, the body, and the
/// retries with their waits all end within `--request-timeout` of its start, so that no
/// server (slow bodies, long `Retry-After`s) holds a read longer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    at: Instant,
    limit: Duration,
}

impl Deadline {
    pub(crate) fn start(limit: Duration) -> Self {
        Deadline {
            at: Instant::now() + limit,
            limit,
        }
    }

    /// The time left, `None` once it has passed.
    pub(crate) fn left(&self) -> Option<Duration> {
        self.at
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    /// Whether a wait of `wait` ends before the deadline, with time left for an answer.
    fn allows(&self, wait: Duration) -> bool {
        self.left().is_some_and(|left| wait < left)
    }

    /// The failure once the deadline passed, after `last` (what the store last said).
    pub(crate) fn passed(&self, last: &str) -> RemoteError {
        let last = if last.is_empty() {
            String::new()
        } else {
            format!("{last}; ")
        };
        RemoteError::Unreachable(format!(
            "{last}no complete answer within --request-timeout ({} s), retries and waits \
             included",
            self.limit.as_secs_f64()
        ))
    }
}

/// Why a request failed: the store's answer, or the run's limits, which a retry (or the bytes
/// of a failed attempt's answer) would pass.
#[derive(Debug)]
pub(crate) enum Failure {
    Remote(RemoteError),
    /// The limit passed.
    Budget(tensorplay_engine::Error),
}

impl From<RemoteError> for Failure {
    fn from(error: RemoteError) -> Self {
        Failure::Remote(error)
    }
}

impl Failure {
    /// As a read's error: the read layer's errors for a store carry text only, so a limit
    /// that stopped a retry is said in the words that name its flag.
    pub(crate) fn into_remote(self) -> RemoteError {
        match self {
            Failure::Remote(error) => error,
            Failure::Budget(refusal) => retries::over(refusal),
        }
    }
}

/// What one request's attempts are charged to. Its first attempt is charged by whoever asked
/// for it (the read layer for a range, the mount for a `HEAD` or a listing page); each further
/// one is a request the server is sent too, charged here before it is sent, and so are the
/// bytes of every failed attempt's answer.
pub(crate) struct Attempts<'a> {
    /// The URL charged.
    path: &'a Path,
    /// The object's tally of range requests sent again, for a range read.
    retries: Option<&'a Retries>,
    sent: Cell<u32>,
}

impl<'a> Attempts<'a> {
    pub(crate) fn new(path: &'a Path, retries: Option<&'a Retries>) -> Self {
        Attempts {
            path,
            retries,
            sent: Cell::new(0),
        }
    }

    /// Before an attempt is sent: every one but the first is charged.
    fn sending(&self) -> Result<(), Failure> {
        let sent = self.sent.get();
        self.sent.set(sent.saturating_add(1));
        if sent == 0 {
            return Ok(());
        }
        match self.retries {
            Some(retries) => retries.charge(self.path),
            None => files::charge(self.path, 1, 0),
        }
        .map_err(Failure::Budget)
    }

    /// Bytes of a failed attempt's answer, received.
    fn received(&self, bytes: u64) -> Result<(), Failure> {
        files::charge(self.path, 0, bytes).map_err(Failure::Budget)
    }
}

/// Sends the request `make` builds, again after a `429` (waiting as `Retry-After` says), a
/// `5xx` or a failed connection, all before `deadline`: a wait that would pass it is not
/// waited, and an attempt the run's limits refuse is not sent. A `412` says the object
/// changed; any other status but success is final. Messages leave the URL to the caller.
pub(crate) fn send(
    deadline: &Deadline,
    attempts: &Attempts<'_>,
    make: impl Fn() -> reqwest::blocking::RequestBuilder,
) -> Result<Response, Failure> {
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        let Some(left) = deadline.left() else {
            return Err(deadline.passed(&last).into());
        };
        attempts.sending()?;
        // The request's own timeout covers its body too: the rest of the deadline.
        match make().timeout(left).send() {
            Ok(response) => {
                let status = response.status();
                if status.is_success() {
                    return Ok(response);
                }
                if status == StatusCode::PRECONDITION_FAILED {
                    return Err(RemoteError::Inconsistent(
                        "the object changed while it was read (412 Precondition Failed)".to_owned(),
                    )
                    .into());
                }
                let wait = if status == StatusCode::TOO_MANY_REQUESTS {
                    Some(retry_after(response.headers(), attempt))
                } else if status.is_server_error() {
                    Some(backoff(attempt))
                } else {
                    None
                };
                let (said, read) = said(response);
                attempts.received(read)?;
                last = format!("HTTP {status}{said}");
                let Some(wait) = wait else {
                    return Err(RemoteError::Unreachable(last).into());
                };
                if !deadline.allows(wait) {
                    return Err(deadline
                        .passed(&format!(
                            "{last}, retry asked after {} s",
                            wait.as_secs_f64()
                        ))
                        .into());
                }
                std::thread::sleep(wait);
            }
            Err(e) => {
                last = without_url(&e);
                let wait = backoff(attempt);
                if !deadline.allows(wait) {
                    return Err(deadline.passed(&last).into());
                }
                std::thread::sleep(wait);
            }
        }
    }
    Err(RemoteError::Unreachable(format!("{last} (after {ATTEMPTS} attempts)")).into())
}

/// What an error answer's body says, as ` (CODE: MESSAGE)`, read no further than
/// [`MAX_ERROR_BODY`] bytes (and within the request's deadline), empty when it says nothing;
/// and the bytes of it read.
fn said(response: Response) -> (String, u64) {
    let mut body = Vec::new();
    // A body cut short still says what it said so far.
    let _ = response.take(MAX_ERROR_BODY as u64).read_to_end(&mut body);
    let said = error_body::summary(&body)
        .map(|said| format!(" ({said})"))
        .unwrap_or_default();
    (said, body.len() as u64)
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100u64 << attempt.min(6))
}

fn retry_after(headers: &HeaderMap, attempt: u32) -> Duration {
    headers
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or_else(|| backoff(attempt), Duration::from_secs)
        .min(MAX_RETRY_AFTER)
}

/// A strong ETag: a weak one (`W/…`) promises no byte-for-byte sameness.
fn strong_etag(headers: &HeaderMap) -> Option<String> {
    let etag = headers.get(header::ETAG)?.to_str().ok()?;
    (!etag.starts_with("W/")).then(|| etag.to_owned())
}

/// A transport error's message without the URL reqwest appends (the caller names it once).
fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(&format!(" for url ({url})"), "");
    }
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        text = format!("{text}: {inner}");
        source = inner.source();
    }
    text
}
