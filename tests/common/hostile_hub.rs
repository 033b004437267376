//! A loopback Hugging Face Hub that misbehaves as an attacker's would: listings without end or
//! of too many entries, file names made to rewrite a log, `429` with a long `Retry-After`,
//! bodies sent a byte a second, content that is not what its `lfs.oid` says, redirects to
//! plain http beyond loopback, answers each slow enough to hold a run for ever together. Any
//! `hf://ORG/REPO` resolves to [`SHA`] and lists what the hostility says; every listed file
//! serves `file` by byte ranges at `/ORG/REPO/resolve/`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use super::range_server::SHA;

/// What the Hub does wrong.
#[derive(Debug, Clone)]
pub enum Hostility {
    /// The tree listing is one page whose body never ends.
    EndlessPage,
    /// The tree listing is `pages` pages of `per_page` small files, each linking the next.
    Pages { pages: u64, per_page: u64 },
    /// The tree lists these names; a name containing `missing` answers `404`.
    Names(Vec<String>),
    /// One file, every range of it answered `429` with `Retry-After: SECONDS`.
    RateLimited(u64),
    /// One file, its ranges sent one byte a second.
    SlowBody,
    /// One file, listed with this `lfs.oid`.
    Lfs(String),
    /// One file, its `resolve` redirected to this URL.
    RedirectTo(String),
    /// Tree pages without end, each of ten small files, each page answered after this wait.
    SlowPages(Duration),
    /// This many files, every range of each answered after this wait.
    SlowFiles(u64, Duration),
    /// The revision asked for answered with this status and body.
    ErrorAnswer(u16, String),
}

pub struct HostileHub {
    pub port: u16,
    /// Bytes of tree listings sent, every page together.
    listed: Arc<AtomicU64>,
    /// Tree pages answered.
    pages: Arc<AtomicU64>,
}

impl HostileHub {
    pub fn start(hostility: Hostility, file: Vec<u8>) -> HostileHub {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("address").port();
        let listed = Arc::new(AtomicU64::new(0));
        let pages = Arc::new(AtomicU64::new(0));
        let (l, p, file) = (Arc::clone(&listed), Arc::clone(&pages), Arc::new(file));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (hostility, file, l, p) = (
                    hostility.clone(),
                    Arc::clone(&file),
                    Arc::clone(&l),
                    Arc::clone(&p),
                );
                std::thread::spawn(move || {
                    let _ = serve(stream, &hostility, &file, &l, &p);
                });
            }
        });
        HostileHub {
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

fn serve(
    stream: TcpStream,
    hostility: &Hostility,
    file: &[u8],
    listed: &AtomicU64,
    pages: &AtomicU64,
) -> std::io::Result<()> {
    let super::request::Request { target, range, .. } = super::request::read(&stream)?;
    let mut out = stream;
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "models", _, _, "revision", _]
            if matches!(hostility, Hostility::ErrorAnswer(..)) =>
        {
            let Hostility::ErrorAnswer(status, body) = hostility else {
                unreachable!()
            };
            respond(&mut out, &format!("{status} Refused"), &[], body.as_bytes())
        }
        ["api", "models", _, _, "revision", _] => respond(
            &mut out,
            "200 OK",
            &[],
            format!("{{\"sha\":\"{SHA}\"}}").as_bytes(),
        ),
        ["api", "models", org, repo, "tree", _] => {
            pages.fetch_add(1, Ordering::SeqCst);
            tree(
                &mut out,
                hostility,
                file,
                query,
                &format!("{org}/{repo}"),
                listed,
            )
        }
        [_, _, "resolve", ..] => resolve(&mut out, hostility, file, path, range),
        _ => respond(&mut out, "404 Not Found", &[], b""),
    }
}

fn entry(path: &str, size: usize, lfs: Option<&str>) -> String {
    let mut value = serde_json::json!({"type": "file", "path": path, "size": size, "oid": "0"});
    if let Some(oid) = lfs {
        value["lfs"] = serde_json::json!({"oid": oid, "size": size, "pointerSize": 134});
    }
    value.to_string()
}

fn tree(
    out: &mut TcpStream,
    hostility: &Hostility,
    file: &[u8],
    query: &str,
    repo: &str,
    listed: &AtomicU64,
) -> std::io::Result<()> {
    let slow_pages;
    let hostility = match hostility {
        Hostility::SlowPages(wait) => {
            std::thread::sleep(*wait);
            slow_pages = Hostility::Pages {
                pages: u64::MAX,
                per_page: 10,
            };
            &slow_pages
        }
        other => other,
    };
    let body = match hostility {
        Hostility::EndlessPage => {
            // Headers without a length, then entries until the client goes away.
            out.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n[")?;
            let chunk: String = (0..256)
                .map(|i| entry(&format!("f{i}.bin"), 1, None) + ",")
                .collect();
            loop {
                out.write_all(chunk.as_bytes())?;
                listed.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            }
        }
        Hostility::Pages { pages, per_page } => {
            let page: u64 = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("cursor="))
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let entries: Vec<String> = (0..*per_page)
                .map(|i| entry(&format!("p{page}/f{i}.bin"), 8, None))
                .collect();
            let body = format!("[{}]", entries.join(","));
            listed.fetch_add(body.len() as u64, Ordering::SeqCst);
            let next = format!(
                "<http://{}/api/models/{repo}/tree/{SHA}?recursive=true&cursor={}>; rel=\"next\"",
                out.local_addr()?,
                page + 1
            );
            let link = [("Link", next.as_str())];
            let headers: &[(&str, &str)] = if page + 1 < *pages { &link } else { &[] };
            return respond(out, "200 OK", headers, body.as_bytes());
        }
        Hostility::Names(names) => {
            let entries: Vec<String> = names.iter().map(|n| entry(n, file.len(), None)).collect();
            format!("[{}]", entries.join(","))
        }
        Hostility::Lfs(oid) => format!("[{}]", entry("model.safetensors", file.len(), Some(oid))),
        Hostility::SlowFiles(files, _) => {
            let entries: Vec<String> = (0..*files)
                .map(|i| entry(&format!("f{i}.safetensors"), file.len(), None))
                .collect();
            format!("[{}]", entries.join(","))
        }
        _ => format!("[{}]", entry("model.safetensors", file.len(), None)),
    };
    listed.fetch_add(body.len() as u64, Ordering::SeqCst);
    respond(out, "200 OK", &[], body.as_bytes())
}

fn resolve(
    out: &mut TcpStream,
    hostility: &Hostility,
    file: &[u8],
    path: &str,
    range: Option<(u64, u64)>,
) -> std::io::Result<()> {
    let len = file.len() as u64;
    let (start, last) = range.unwrap_or((0, len.saturating_sub(1)));
    let last = last.min(len.saturating_sub(1));
    let body = file.get(start as usize..=last as usize).unwrap_or_default();
    let content_range = format!("bytes {start}-{last}/{len}");
    let partial = [
        ("Content-Range", content_range.as_str()),
        ("ETag", "\"v1\""),
    ];
    match hostility {
        Hostility::Names(_) if path.contains("missing") => respond(out, "404 Not Found", &[], b""),
        Hostility::RateLimited(seconds) => respond(
            out,
            "429 Too Many Requests",
            &[("Retry-After", &seconds.to_string())],
            b"",
        ),
        Hostility::RedirectTo(url) => respond(out, "302 Found", &[("Location", url)], b""),
        Hostility::SlowFiles(_, wait) => {
            std::thread::sleep(*wait);
            respond(out, "206 Partial Content", &partial, body)
        }
        Hostility::SlowBody => {
            let head = format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: \
                 {content_range}\r\nETag: \"v1\"\r\nConnection: close\r\n\r\n",
                body.len()
            );
            out.write_all(head.as_bytes())?;
            for byte in body {
                out.write_all(&[*byte])?;
                out.flush()?;
                std::thread::sleep(Duration::from_secs(1));
            }
            Ok(())
        }
        _ => respond(out, "206 Partial Content", &partial, body),
    }
}

fn respond(
    out: &mut TcpStream,
    status: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    let _ = out.flush();
    // Drain what the client may still send, so closing does not reset the connection.
    let _ = out.shutdown(std::net::Shutdown::Write);
    let _ = out.read(&mut [0u8; 64]);
    Ok(())
}

/// A safetensors file of one small F32 tensor: `values` as given.
pub fn small_safetensors(values: &[f32]) -> Vec<u8> {
    let len = values.len() * 4;
    let header = format!(
        r#"{{"w":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{len}]}}}}"#,
        values.len()
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}
