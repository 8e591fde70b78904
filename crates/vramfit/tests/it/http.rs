//! A running `vramfit serve` and a small HTTP/1.1 client over `TcpStream` (one request per
//! connection), enough for the API tests and for talking to chromedriver's WebDriver API.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::cli::vramfit;

/// `vramfit serve --port 0`, killed when dropped.
pub struct Served {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Served {
    pub fn start() -> Served {
        let mut child = vramfit()
            .args(["serve", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("vramfit serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("http://")
            .and_then(|rest| rest.strip_suffix('/'))
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("vramfit serve printed {line:?}, not its address"));
        Served { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request with the given extra headers; `Content-Length` is set from `body`.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("Host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    read_response(&mut stream)
}

/// A JSON `POST`.
pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap();
    request(addr, "POST", path, &[("Content-Type", "application/json")], &bytes)
}

/// Reads one response: up to its `Content-Length`, its last chunk, or the end of the
/// connection (chromedriver keeps connections open whatever the request says).
pub fn read_response(stream: &mut TcpStream) -> Response {
    let mut raw = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let mut fill = |raw: &mut Vec<u8>| -> bool {
        // A signal delivered to the test process (a child of another test exiting) can
        // interrupt the read: try again, as `read_to_end` does.
        let n = loop {
            match stream.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                other => break other.expect("a response before the timeout"),
            }
        };
        raw.extend_from_slice(&buf[..n]);
        n > 0
    };
    let split = loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break split;
        }
        assert!(fill(&mut raw), "the connection closed before a complete head");
    };
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let find = |name: &str| {
        headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
    };
    let length = find("content-length").and_then(|v| v.parse::<usize>().ok());
    let chunked = find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let start = split + 4;
    loop {
        let body = &raw[start..];
        let complete = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.ends_with(b"0\r\n\r\n"),
            None => false,
        };
        if complete || !fill(&mut raw) {
            break;
        }
    }
    let mut body = raw[start..].to_vec();
    if let Some(n) = length {
        body.truncate(n);
    } else if chunked {
        body = dechunk(&body);
    }
    Response { status, headers, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&data[..end]);
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 2 + size + 2..];
    }
    out
}
