//! The HTTP client `object_store` reads S3 and Azure through, so that what it fetches beyond
//! an object's ranges (a prefix's listing pages, a `HEAD`) counts against the run's remote
//! budget and deadline as a Hub listing does, and no error answer reaches a message raw.
//!
//! Range reads are counted by the read layer, which asks for them: a request with a `Range`
//! header is left to it, every other one is counted here before it is sent, and its body as it
//! arrives, cut off once past the budget.

use crate::error_body::{self, MAX_ERROR_BODY};
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
        let ranged = request.headers().contains_key(http::header::RANGE);
        let Counted { path, refusal } = &self.counted;
        if !ranged {
            files::charge(path, 1, 0).map_err(|e| refusal.set(e))?;
        }
        let response = self.inner.execute(request).await?;
        let (parts, body) = response.into_parts();
        let body = if ranged {
            body
        } else {
            HttpResponseBody::new(CountedBody {
                inner: body,
                counted: self.counted.clone(),
                read: 0,
            })
        };
        if parts.status.is_success() {
            return Ok(HttpResponse::from_parts(parts, body));
        }
        // object_store puts an error answer's whole body in its message: it gets the summary.
        let said = summarise(body).await;
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

/// A body counted against the run's byte budget as it arrives.
struct CountedBody {
    inner: HttpResponseBody,
    counted: Counted,
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
        let Counted { path, refusal } = &self.counted;
        if let Err(e) = files::charge(path, 0, len) {
            return Poll::Ready(Some(Err(refusal.set(e))));
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
