//! The HTTP client `object_store` reads S3, Azure and GCS through, so that everything it sends
//! (a prefix's listing pages, a `HEAD`, a credential request, every retry) counts against the
//! run's remote budget and deadline as a Hub listing does, and no error answer reaches a message
//! raw.
//!
//! A range read is charged one request and its bytes by the read layer, which asks for it: its
//! first attempt (each attempt is marked [`RangeRead`]) and the range's bytes, whichever attempt
//! brings them, are left to it. Every other request, a range read's retries included, is
//! counted here before it is sent, and every other body (an error answer's too) as it arrives,
//! cut off once past the budget.

use crate::error_body::{self, MAX_ERROR_BODY};
use crate::retries::Retries;
use async_trait::async_trait;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService, ReqwestConnector,
};
use object_store::ClientOptions;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tensorplay_engine::files;

/// The largest answer other than a range (a listing page: S3 and Azure list 1 000 entries, a
/// few hundred KiB): object_store holds a page whole before parsing it.
const MAX_ANSWER: u64 = 16 << 20;

/// Makes clients that count what they fetch against the run's limits, charged to `path` (the
/// path as given), keeping the refusal that stopped a request for [`Refusal::take`].
#[derive(Debug, Clone)]
pub(crate) struct Counted {
    path: PathBuf,
    refusal: Refusal,
}

/// The run's limit that stopped one of the client's requests: object_store's error only
/// carries its text, so the typed error that names the flag is kept here.
#[derive(Debug, Clone, Default)]
pub(crate) struct Refusal(Arc<Mutex<Option<tensorplay_engine::Error>>>);

impl Refusal {
    fn set(&self, error: tensorplay_engine::Error) -> HttpError {
        let text = error.to_string();
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(error);
        // Not retried: object_store retries no `Unknown` error.
        HttpError::new(HttpErrorKind::Unknown, std::io::Error::other(text))
    }

    /// The refusal, if a limit stopped a request.
    pub(crate) fn take(&self) -> Option<tensorplay_engine::Error> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The error to end a request with once a limit stopped it (kept for [`Refusal::take`]):
    /// an answer whose body passed the budget is not to be retried.
    fn stopped(&self) -> Option<HttpError> {
        let slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let text = slot.as_ref()?.to_string();
        Some(HttpError::new(
            HttpErrorKind::Unknown,
            std::io::Error::other(text),
        ))
    }
}

/// Marks the attempts of one range read (object_store sends a request's extensions with every
/// attempt): the read layer charged its first one, each further one is charged here to the
/// object's path and tallied.
#[derive(Debug, Clone)]
pub(crate) struct RangeRead {
    path: PathBuf,
    retries: Retries,
    sent: Arc<AtomicU32>,
    refusal: Refusal,
}

impl RangeRead {
    pub(crate) fn new(path: PathBuf, retries: Retries) -> Self {
        RangeRead {
            path,
            retries,
            sent: Arc::default(),
            refusal: Refusal::default(),
        }
    }

    /// The limit that stopped one of the read's attempts, if one did.
    pub(crate) fn refusal(&self) -> &Refusal {
        &self.refusal
    }
}

impl Counted {
    pub(crate) fn new(path: &str) -> Self {
        Counted {
            path: PathBuf::from(path),
            refusal: Refusal::default(),
        }
    }

    pub(crate) fn refusal(&self) -> &Refusal {
        &self.refusal
    }
}

impl HttpConnector for Counted {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Service {
            inner,
            counted: self.clone(),
        }))
    }
}

#[derive(Debug)]
struct Service {
    inner: HttpClient,
    counted: Counted,
}

#[async_trait]
impl HttpService for Service {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let read = request.extensions().get::<RangeRead>().cloned();
        // The path and the refusal slot a charge goes to: the object's for a range read.
        let (path, refusal) = match &read {
            Some(read) => (read.path.clone(), read.refusal.clone()),
            None => (self.counted.path.clone(), self.counted.refusal.clone()),
        };
        let first_of_read = match &read {
            Some(read) => read.sent.fetch_add(1, Ordering::Relaxed) == 0,
            None => false,
        };
        match &read {
            Some(_) if first_of_read => {}
            Some(read) => read.retries.charge(&path).map_err(|e| refusal.set(e))?,
            None => files::charge(&path, 1, 0).map_err(|e| refusal.set(e))?,
        }
        let response = self.inner.execute(request).await?;
        let (parts, body) = response.into_parts();
        let success = parts.status.is_success();
        // A range read's answer is its bytes, which the read layer charged, whichever attempt
        // brings them (object_store resumes a broken body where it broke).
        let body = if success && read.is_some() {
            body
        } else {
            HttpResponseBody::new(CountedBody {
                inner: body,
                path,
                refusal: refusal.clone(),
                read: 0,
            })
        };
        if success {
            return Ok(HttpResponse::from_parts(parts, body));
        }
        // object_store puts an error answer's whole body in its message: it gets the summary.
        let said = summarise(body).await;
        if let Some(stopped) = refusal.stopped() {
            return Err(stopped);
        }
        Ok(HttpResponse::from_parts(
            parts,
            HttpResponseBody::from(said),
        ))
    }
}

/// The code and message of an error answer's body, of its first [`MAX_ERROR_BODY`] bytes.
async fn summarise(body: HttpResponseBody) -> String {
    use futures_util::StreamExt;
    let mut stream = body.bytes_stream();
    let mut head = Vec::new();
    while head.len() < MAX_ERROR_BODY {
        match stream.next().await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            _ => break,
        }
    }
    error_body::summary(&head).unwrap_or_default()
}

/// A body counted against the run's byte budget as it arrives, charged to `path`.
struct CountedBody {
    inner: HttpResponseBody,
    path: PathBuf,
    refusal: Refusal,
    read: u64,
}

impl Body for CountedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        let Poll::Ready(Some(Ok(frame))) = polled else {
            return polled;
        };
        let len = frame.data_ref().map_or(0, |d| d.len() as u64);
        self.read = self.read.saturating_add(len);
        if let Err(e) = files::charge(&self.path, 0, len) {
            return Poll::Ready(Some(Err(self.refusal.set(e))));
        }
        if self.read > MAX_ANSWER {
            return Poll::Ready(Some(Err(HttpError::new(
                HttpErrorKind::Decode,
                std::io::Error::other(format!("an answer larger than {MAX_ANSWER} bytes")),
            ))));
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
