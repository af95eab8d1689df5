//! Raw HTTP/1.1 to a test server: readiness checks, and requests the SDK would never send.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends `method path` to `127.0.0.1:port` with `headers` and `body` (`key` becomes a Bearer header)
/// and reads the answer. A `host` among `headers` replaces ours (preview origins are chosen by Host).
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<RawResponse> {
    let host = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map_or_else(|| format!("127.0.0.1:{port}"), |(_, v)| v.to_string());
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if let Some(key) = key {
        req.push_str(&format!("Authorization: Bearer {key}\r\n"));
    }
    for (name, value) in headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    request_bytes(port, &bytes)
}

/// Sends `request` verbatim (head and any body) to `127.0.0.1:port` and reads the answer.
pub fn request_bytes(port: u16, request: &[u8]) -> std::io::Result<RawResponse> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(request)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    RawResponse::parse(&raw)
}

/// An answer read off a raw socket.
#[derive(Debug)]
pub struct RawResponse {
    /// HTTP status.
    pub status: u16,
    /// Header block, lower-cased names as sent.
    pub head: String,
    /// Body (de-chunked).
    pub body: String,
}

impl RawResponse {
    fn parse(raw: &[u8]) -> std::io::Result<RawResponse> {
        let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| bad("no end of headers"))?;
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut body = raw[split + 4..].to_vec();
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad("no status"))?;
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            body = dechunk(&body);
        }
        Ok(RawResponse { status, head, body: String::from_utf8_lossy(&body).into_owned() })
    }

    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }

    /// Asserts a JSON error answer `{"error":{"code","message"}}` and returns its message.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "unexpected answer: {self:?}");
        let v = self.json();
        assert_eq!(v["error"]["code"], code, "unexpected error body: {}", self.body);
        let message = v["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("error without a message: {}", self.body))
            .to_string();
        assert!(!message.trim().is_empty(), "empty error message: {}", self.body);
        message
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        let end = (start + size).min(b.len());
        out.extend_from_slice(&b[start..end]);
        b = &b[(end + 2).min(b.len())..];
    }
    out
}
