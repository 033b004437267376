//! A loopback S3 and Azure Blob Storage that misbehave as an attacker's would: a prefix listing
//! of large pages without end (each page's continuation token naming the next), or every
//! request answered with an error whose body is large and made to rewrite a terminal, or an
//! object whose name object_store refuses. S3 is
//! addressed path style (`/BUCKET/KEY`), Azure as its emulator is
//! (`/devstoreaccount1/CONTAINER/KEY`); every object `HEAD`ed is missing, so a key is listed as
//! a prefix.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the store does wrong.
#[derive(Debug, Clone)]
pub enum Hostility {
    /// Listing pages without end, each of 1 000 entries of about 1 KiB.
    ListingBomb,
    /// Every request answered with this status and body.
    ErrorAnswer(u16, String),
    /// One listing page of one object under the prefix, named this (after the prefix).
    Named(String),
}

pub struct HostileStore {
    pub port: u16,
    /// Bytes of listing pages sent, every page together.
    listed: Arc<AtomicU64>,
    /// Listing pages answered.
    pages: Arc<AtomicU64>,
}

impl HostileStore {
    pub fn start(hostility: Hostility) -> HostileStore {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("address").port();
        let listed = Arc::new(AtomicU64::new(0));
        let pages = Arc::new(AtomicU64::new(0));
        let (l, p) = (Arc::clone(&listed), Arc::clone(&pages));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (hostility, l, p) = (hostility.clone(), Arc::clone(&l), Arc::clone(&p));
                std::thread::spawn(move || {
                    let _ = serve(stream, &hostility, &l, &p);
                });
            }
        });
        HostileStore {
            port,
            listed,
            pages,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn listed_bytes(&self) -> u64 {
        self.listed.load(Ordering::SeqCst)
    }

    pub fn pages(&self) -> u64 {
        self.pages.load(Ordering::SeqCst)
    }
}

/// Entries a page lists, and the padding that makes each about 1 KiB.
const PER_PAGE: u64 = 1000;
const PAD: usize = 900;

fn serve(
    stream: TcpStream,
    hostility: &Hostility,
    listed: &AtomicU64,
    pages: &AtomicU64,
) -> std::io::Result<()> {
    let super::request::Request { method, target, .. } = super::request::read(&stream)?;
    let mut out = stream;
    if let Hostility::ErrorAnswer(status, body) = hostility {
        let body = if method == "HEAD" { "" } else { body };
        return respond(&mut out, &format!("{status} Refused"), body.as_bytes());
    }
    let query = target.split_once('?').map_or("", |(_, query)| query);
    let param = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(|v| v.replace("%2F", "/"))
    };
    let page: u64 = param("continuation-token")
        .or_else(|| param("marker"))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let prefix = param("prefix").unwrap_or_default();
    let (per_page, next) = match hostility {
        Hostility::Named(_) => (1, String::new()),
        _ => (PER_PAGE, (page + 1).to_string()),
    };
    let key = |i: u64| {
        let under = prefix.trim_end_matches('/');
        match hostility {
            Hostility::Named(name) => format!("{under}/{name}"),
            _ => format!("{under}/p{page}/{i}-{}.bin", "a".repeat(PAD)),
        }
    };
    let body = if query.contains("list-type=2") {
        let contents: String = (0..per_page)
            .map(|i| {
                format!(
                    "<Contents><Key>{}</Key><LastModified>2026-12-02T00:00:00.000Z</LastModified>\
                     <ETag>&quot;v1&quot;</ETag><Size>8</Size></Contents>",
                    key(i)
                )
            })
            .collect();
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>bucket</Name>\
             <Prefix>{prefix}</Prefix><IsTruncated>{}</IsTruncated>\
             <NextContinuationToken>{next}</NextContinuationToken>{contents}</ListBucketResult>",
            !next.is_empty()
        )
    } else if query.contains("comp=list") {
        let blobs: String = (0..per_page)
            .map(|i| {
                format!(
                    "<Blob><Name>{}</Name><Properties><Last-Modified>Wed, 02 Dec 2026 00:00:00 \
                     GMT</Last-Modified><Etag>&quot;v1&quot;</Etag><Content-Length>8\
                     </Content-Length><Content-Type>application/octet-stream</Content-Type>\
                     </Properties></Blob>",
                    key(i)
                )
            })
            .collect();
        format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults><Prefix>{prefix}\
             </Prefix><Blobs>{blobs}</Blobs><NextMarker>{next}</NextMarker></EnumerationResults>"
        )
    } else {
        // A HEAD of the key: missing, so that it is listed as a prefix.
        return respond(&mut out, "404 Not Found", b"");
    };
    pages.fetch_add(1, Ordering::SeqCst);
    listed.fetch_add(body.len() as u64, Ordering::SeqCst);
    respond(&mut out, "200 OK", body.as_bytes())
}

fn respond(out: &mut TcpStream, status: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/xml\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    let _ = out.flush();
    // Drain what the client may still send, so closing does not reset the connection.
    let _ = out.shutdown(std::net::Shutdown::Write);
    let _ = out.read(&mut [0u8; 64]);
    Ok(())
}
