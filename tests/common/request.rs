//! The head of an HTTP/1.1 request, as the loopback servers read it: what they answer by.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;

pub struct Request {
    pub method: String,
    pub target: String,
    /// `Range: bytes=A-B`, inclusive, when the request has one that parses.
    pub range: Option<(u64, u64)>,
}

/// The request line and the headers of the request on `stream`, up to its blank line.
pub fn read(stream: &TcpStream) -> std::io::Result<Request> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut range = None;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("range") {
                range = parse_range(value.trim());
            }
        }
    }
    Ok(Request {
        method,
        target,
        range,
    })
}

fn parse_range(value: &str) -> Option<(u64, u64)> {
    let (start, end) = value.strip_prefix("bytes=")?.split_once('-')?;
    Some((start.parse().ok()?, end.parse().ok()?))
}
