//! A loopback HTTP server for the remote tests: serves files of a folder by byte ranges, the
//! Hugging Face Hub's revision, tree and resolve endpoints over it, S3, Azure Blob Storage and
//! Google Cloud Storage as object_store addresses them, and the faults a real store shows (a
//! whole body for a range, a changed object, a short body, 429, 500, 503 then success).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The bucket the S3 emulation serves the folder as.
pub const BUCKET: &str = "bucket";

/// The bucket the Google Cloud Storage emulation serves the folder as.
pub const GCS_BUCKET: &str = "gcs-bucket";

/// The commit every emulated repository is at.
pub const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// What the server does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Answers a range request with `200` and the whole object.
    WholeBody,
    /// Serves another ETag (and other bytes) from the given range request on.
    ChangesAfter(usize),
    /// Sends fewer bytes than its `Content-Range` says, on every range request.
    ShortBody,
    /// Answers the first range request `429 Retry-After: 0`, then serves.
    RateLimitedOnce,
    /// Answers every range request with this status.
    Status(u16),
    /// Answers the first this many range requests `503` with a short error body, then serves.
    UnavailableFirst(usize),
    /// Answers range requests after three seconds.
    Slow,
}

pub struct RangeServer {
    pub port: u16,
    ranges: Arc<AtomicUsize>,
    fault: Arc<Mutex<Fault>>,
    hub: Arc<Hub>,
}

/// What the Hub emulation lists beyond names and sizes.
#[derive(Default)]
struct Hub {
    /// `REPO/PATH` → the `lfs.oid` its tree listing gives the file (stored in LFS).
    lfs: Mutex<BTreeMap<String, String>>,
}

impl RangeServer {
    /// Serves `dir`: `/files/<path>` directly, and the Hub's endpoints for any `ORG/REPO`.
    pub fn start(dir: &Path) -> RangeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("address").port();
        let ranges = Arc::new(AtomicUsize::new(0));
        let fault = Arc::new(Mutex::new(Fault::None));
        let hub = Arc::new(Hub::default());
        let state = (
            dir.to_owned(),
            Arc::clone(&ranges),
            Arc::clone(&fault),
            Arc::clone(&hub),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (dir, ranges, fault, hub) = (
                    state.0.clone(),
                    Arc::clone(&state.1),
                    Arc::clone(&state.2),
                    Arc::clone(&state.3),
                );
                std::thread::spawn(move || {
                    let fault = *fault.lock().unwrap();
                    let _ = serve(stream, &dir, &ranges, fault, port, &hub);
                });
            }
        });
        RangeServer {
            port,
            ranges,
            fault,
            hub,
        }
    }

    /// Lists `REPO/PATH` as stored in LFS with this `oid` (the Hub's SHA-256 of its content).
    pub fn set_lfs(&self, path: &str, oid: &str) {
        self.hub.lock_lfs().insert(path.to_owned(), oid.to_owned());
    }

    pub fn set_fault(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
        self.ranges.store(0, Ordering::SeqCst);
    }

    /// Range requests served since the last fault was set.
    pub fn range_requests(&self) -> usize {
        self.ranges.load(Ordering::SeqCst)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/files/{path}", self.port)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Hub {
    fn lock_lfs(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.lfs.lock().unwrap()
    }
}

fn serve(
    stream: TcpStream,
    dir: &Path,
    ranges: &AtomicUsize,
    fault: Fault,
    port: u16,
    hub: &Hub,
) -> std::io::Result<()> {
    let super::request::Request {
        method,
        target,
        range,
    } = super::request::read(&stream)?;
    let mut out = stream;
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "models", _org, _repo, "revision", _rev] => respond(
            &mut out,
            "200 OK",
            &[],
            format!("{{\"sha\":\"{SHA}\"}}").as_bytes(),
            &method,
        ),
        ["api", "models", _org, repo, "tree", sha]
            if *sha == SHA && query.contains("recursive=true") =>
        {
            let body = tree(&dir.join(repo), repo, &hub.lock_lfs());
            respond(&mut out, "200 OK", &[], body.as_bytes(), &method)
        }
        // The Hub redirects large files to a content host: here, the same server's /files/.
        [_org, repo, "resolve", sha, rest @ ..] if *sha == SHA => {
            let location = format!("http://127.0.0.1:{port}/files/{repo}/{}", rest.join("/"));
            respond(
                &mut out,
                "302 Found",
                &[("Location", &location)],
                b"",
                &method,
            )
        }
        // Azure Blob Storage as its emulator addresses it: a listing of the container, or a
        // blob of it.
        ["devstoreaccount1", BUCKET] if query.contains("comp=list") => {
            let prefix = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("prefix="))
                .unwrap_or("")
                .replace("%2F", "/");
            let body = list_container(dir, &prefix);
            respond(&mut out, "200 OK", &[], body.as_bytes(), &method)
        }
        ["devstoreaccount1", BUCKET, rest @ ..] => {
            let file = dir.join(rest.join("/"));
            match std::fs::read(&file) {
                Ok(bytes) => serve_file(&mut out, &method, &bytes, range, ranges, fault),
                Err(_) => respond(&mut out, "404 Not Found", &[], b"", &method),
            }
        }
        // Google Cloud Storage's XML API, as object_store addresses it: a listing of the
        // bucket (S3's ListObjectsV2), or an object of it by its name, every character but
        // letters and digits percent-encoded.
        [bucket, rest @ ..] if percent_decoded(bucket) == GCS_BUCKET => match rest {
            [] if query.contains("list-type=2") => {
                let prefix = query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("prefix="))
                    .map(percent_decoded)
                    .unwrap_or_default();
                let body = list_bucket(dir, &prefix);
                respond(&mut out, "200 OK", &[], body.as_bytes(), &method)
            }
            [name] => match std::fs::read(dir.join(percent_decoded(name))) {
                Ok(bytes) => serve_file(&mut out, &method, &bytes, range, ranges, fault),
                Err(_) => respond(&mut out, "404 Not Found", &[], b"", &method),
            },
            _ => respond(&mut out, "404 Not Found", &[], b"", &method),
        },
        // S3, path style: a listing of the bucket, or an object of it.
        [BUCKET] if query.contains("list-type=2") => {
            let prefix = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("prefix="))
                .unwrap_or("")
                .replace("%2F", "/");
            let body = list_bucket(dir, &prefix);
            respond(&mut out, "200 OK", &[], body.as_bytes(), &method)
        }
        [BUCKET, rest @ ..] => {
            let file = dir.join(rest.join("/"));
            match std::fs::read(&file) {
                Ok(bytes) => serve_file(&mut out, &method, &bytes, range, ranges, fault),
                Err(_) => respond(&mut out, "404 Not Found", &[], b"", &method),
            }
        }
        ["files", rest @ ..] => {
            let file = dir.join(rest.join("/"));
            match std::fs::read(&file) {
                Ok(bytes) => serve_file(&mut out, &method, &bytes, range, ranges, fault),
                Err(_) => respond(&mut out, "404 Not Found", &[], b"", &method),
            }
        }
        _ => respond(&mut out, "404 Not Found", &[], b"", &method),
    }
}

fn serve_file(
    out: &mut TcpStream,
    method: &str,
    bytes: &[u8],
    range: Option<(u64, u64)>,
    ranges: &AtomicUsize,
    fault: Fault,
) -> std::io::Result<()> {
    let len = bytes.len() as u64;
    let Some((start, last)) = range else {
        let etag = "\"v1\"".to_owned();
        return respond(out, "200 OK", &[("ETag", &etag)], bytes, method);
    };
    let n = ranges.fetch_add(1, Ordering::SeqCst);
    let changed = matches!(fault, Fault::ChangesAfter(after) if n >= after);
    let etag = if changed { "\"v2\"" } else { "\"v1\"" };
    if fault == Fault::Slow {
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    match fault {
        Fault::WholeBody => return respond(out, "200 OK", &[("ETag", etag)], bytes, method),
        Fault::RateLimitedOnce if n == 0 => {
            return respond(
                out,
                "429 Too Many Requests",
                &[("Retry-After", "0")],
                b"",
                method,
            )
        }
        Fault::Status(code) => {
            return respond(out, &format!("{code} Fault"), &[], b"", method);
        }
        Fault::UnavailableFirst(times) if n < times => {
            let body = b"<Error><Code>SlowDown</Code><Message>busy</Message></Error>";
            return respond(out, "503 Service Unavailable", &[], body, method);
        }
        _ => {}
    }
    let last = last.min(len.saturating_sub(1));
    let Some(body) = bytes.get(start as usize..=last as usize) else {
        return respond(out, "416 Range Not Satisfiable", &[], b"", method);
    };
    let content_range = format!("bytes {start}-{last}/{len}");
    let mut body = body.to_vec();
    if changed {
        body.iter_mut().for_each(|b| *b = !*b);
    }
    if fault == Fault::ShortBody {
        // Says the full length, sends half, closes.
        let head = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: {content_range}\r\nETag: {etag}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        out.write_all(head.as_bytes())?;
        return out.write_all(&body[..body.len() / 2]);
    }
    respond(
        out,
        "206 Partial Content",
        &[("Content-Range", &content_range), ("ETag", etag)],
        &body,
        method,
    )
}

fn respond(
    out: &mut TcpStream,
    status: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    method: &str,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nAccept-Ranges: bytes\r\nConnection: close\r\nLast-Modified: {MODIFIED}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    if method != "HEAD" {
        out.write_all(body)?;
    }
    let _ = out.flush();
    // Drain what the client may still send, so closing does not reset the connection.
    let _ = out.shutdown(std::net::Shutdown::Write);
    let _ = out.read(&mut [0u8; 64]);
    Ok(())
}

const MODIFIED: &str = "Wed, 02 Dec 2026 00:00:00 GMT";

/// S3's ListObjectsV2 answer for every file under `prefix` (one page).
fn list_bucket(dir: &Path, prefix: &str) -> String {
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort();
    let contents: String = files
        .into_iter()
        .filter(|(key, _)| key.starts_with(prefix))
        .map(|(key, size)| {
            format!(
                "<Contents><Key>{key}</Key><LastModified>2026-12-02T00:00:00.000Z</LastModified>\
                 <ETag>&quot;v1&quot;</ETag><Size>{size}</Size></Contents>"
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>{BUCKET}</Name>\
         <Prefix>{prefix}</Prefix><IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
    )
}

/// Azure's List Blobs answer for every file under `prefix` (one page).
fn list_container(dir: &Path, prefix: &str) -> String {
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort();
    let blobs: String = files
        .into_iter()
        .filter(|(key, _)| key.starts_with(prefix))
        .map(|(key, size)| {
            format!(
                "<Blob><Name>{key}</Name><Properties><Last-Modified>{MODIFIED}</Last-Modified>\
                 <Etag>&quot;v1&quot;</Etag><Content-Length>{size}</Content-Length>\
                 <Content-Type>application/octet-stream</Content-Type></Properties></Blob>"
            )
        })
        .collect();
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults><Prefix>{prefix}</Prefix>\
         <Blobs>{blobs}</Blobs><NextMarker/></EnumerationResults>"
    )
}

/// `text` with each `%XX` replaced by the byte it encodes.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = text.get(i + 1..i + 3).filter(|_| bytes[i] == b'%');
        match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every file under `dir`, relative to `base`, with its size.
fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path: PathBuf = entry.path();
        if path.is_dir() {
            walk(&path, base, out);
        } else if let Ok(meta) = path.metadata() {
            let rel = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((rel, meta.len()));
        }
    }
}

/// The Hub's recursive tree listing of a folder: every file with its size, and the `lfs`
/// object of those `lfs` names (`REPO/PATH`).
fn tree(dir: &Path, repo: &str, lfs: &BTreeMap<String, String>) -> String {
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort();
    let entries: Vec<serde_json::Value> = files
        .into_iter()
        .map(|(path, size)| {
            let mut entry =
                serde_json::json!({"type": "file", "path": path, "size": size, "oid": "0"});
            if let Some(oid) = lfs.get(&format!("{repo}/{path}")) {
                entry["lfs"] = serde_json::json!({"oid": oid, "size": size, "pointerSize": 134});
            }
            entry
        })
        .collect();
    serde_json::Value::Array(entries).to_string()
}
