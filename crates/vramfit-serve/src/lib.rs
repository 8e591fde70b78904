//! The web side of `vramfit serve`: an HTTP server on the loopback interface, the plumbing of
//! its JSON API (routes, body caps, JSON errors, one thread per request) and the page itself,
//! embedded in the binary (`assets.rs`): no external scripts, styles or fonts.
//!
//! What a request *means* is not decided here: the binary implements [`Api`] by calling the
//! very functions that write `vramfit estimate|doctor|lint --format json`, so the API's bodies
//! are the CLI's. This crate only knows HTTP; only it names `tiny_http`.

#![deny(missing_docs)]

mod assets;
mod route;

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use route::{Request, Route, respond};

/// The largest request body accepted; larger ones get 413. A `config.json` is at most 4 MiB,
/// and a pasted log or script as JSON text fits well inside.
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// Requests answered at the same time; more get 503 until one finishes.
pub const MAX_IN_FLIGHT: usize = 32;

/// Stack of each request's thread: the Python parser behind `/api/lint` recurses on deeply
/// nested code (the same size `vramfit lint` gives its workers).
const HANDLER_STACK_BYTES: usize = 256 << 20;

/// What the binary answers: the JSON API's bodies.
pub trait Api: Send + Sync + 'static {
    /// `GET /api/options`: the choices the page offers (models, GPUs, precisions, ...).
    fn options(&self) -> Reply;
    /// A `POST` to one of the API's routes, with its body already parsed as a JSON object.
    fn post(&self, route: Route, body: &serde_json::Map<String, serde_json::Value>) -> Reply;
}

/// One HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// 200 with a JSON body.
    pub fn json(body: Vec<u8>) -> Self {
        Reply { status: 200, content_type: "application/json", body }
    }

    /// 200 with an SVG image.
    pub fn svg(body: Vec<u8>) -> Self {
        Reply { status: 200, content_type: "image/svg+xml", body }
    }

    /// An error as JSON: `{"error": "...", "hint": "..."}` (the hint may be null), the same
    /// two lines the CLI prints as `error:` and `hint:`.
    pub fn error(status: u16, error: &str, hint: Option<&str>) -> Self {
        let body = serde_json::json!({ "error": error, "hint": hint });
        let mut bytes = serde_json::to_vec(&body).unwrap_or_default();
        bytes.push(b'\n');
        Reply { status, content_type: "application/json", body: bytes }
    }
}

/// A bound, not yet running server.
pub struct Server {
    inner: tiny_http::Server,
    addr: SocketAddr,
}

impl Server {
    /// Binds `host:port` (`port` 0 picks a free one).
    pub fn bind(host: IpAddr, port: u16) -> Result<Server, String> {
        let inner = tiny_http::Server::http(SocketAddr::new(host, port))
            .map_err(|e| format!("cannot listen on {}: {e}", SocketAddr::new(host, port)))?;
        let addr = inner
            .server_addr()
            .to_ip()
            .ok_or_else(|| "the server is not listening on an IP address".to_owned())?;
        Ok(Server { inner, addr })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers requests until the process ends, each on its own thread.
    pub fn run(self, api: Arc<dyn Api>) {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let port = self.addr.port();
        let loopback = self.addr.ip().is_loopback();
        for request in self.inner.incoming_requests() {
            if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
                in_flight.fetch_sub(1, Ordering::SeqCst);
                let reply =
                    Reply::error(503, "too many requests at once", Some("retry in a moment"));
                let _ = request.respond(response(reply));
                continue;
            }
            let api = Arc::clone(&api);
            let counter = Arc::clone(&in_flight);
            let spawned = std::thread::Builder::new()
                .name("vramfit-serve-request".into())
                .stack_size(HANDLER_STACK_BYTES)
                .spawn(move || {
                    answer(request, api.as_ref(), loopback.then_some(port));
                    counter.fetch_sub(1, Ordering::SeqCst);
                });
            if spawned.is_err() {
                // The request was moved into the closure that never ran; its connection is
                // dropped, and tiny_http answers it with 500.
                in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Reads one request (capping its body), routes it and writes the reply.
fn answer(mut request: tiny_http::Request, api: &dyn Api, loopback_port: Option<u16>) {
    let header = |name: &str| {
        request
            .headers()
            .iter()
            .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str().to_owned())
    };
    let head = Request {
        method: request.method().as_str().to_owned(),
        url: request.url().to_owned(),
        host: header("Host"),
        content_type: header("Content-Type"),
        loopback_port,
    };
    let body = match read_body(&mut request) {
        Ok(body) => body,
        Err(reply) => {
            let _ = request.respond(response(reply));
            return;
        }
    };
    let reply =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| respond(api, &head, &body)))
            .unwrap_or_else(|_| {
                Reply::error(
                    500,
                    "internal error while answering this request",
                    Some("this is a bug in vramfit; the same input on the command line shows more"),
                )
            });
    let _ = request.respond(response(reply));
}

fn read_body(request: &mut tiny_http::Request) -> Result<Vec<u8>, Reply> {
    let too_large = || {
        Reply::error(
            413,
            &format!("request body over {} MiB", MAX_BODY_BYTES >> 20),
            Some("send a config.json, a log excerpt or a script of a few MiB at most"),
        )
    };
    if request.body_length().is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    let limit = u64::try_from(MAX_BODY_BYTES).unwrap_or(u64::MAX).saturating_add(1);
    request
        .as_reader()
        .take(limit)
        .read_to_end(&mut body)
        .map_err(|e| Reply::error(400, &format!("cannot read the request body: {e}"), None))?;
    if body.len() > MAX_BODY_BYTES {
        return Err(too_large());
    }
    Ok(body)
}

fn response(reply: Reply) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let mut response = tiny_http::Response::from_data(reply.body).with_status_code(reply.status);
    let headers: [(&str, &str); 4] = [
        ("Content-Type", reply.content_type),
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        (
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    ];
    for (name, value) in headers {
        if let Ok(header) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(header);
        }
    }
    response
}
