//! From a request's method, path, headers and body to a [`Reply`]: the page's files, the API's
//! routes, and every refusal (404, 405, 403, 415, 400) as a JSON error. No I/O.

use serde_json::Value;

use crate::{Api, Reply, assets};

/// The API's `POST` routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/api/estimate`: the body of `vramfit estimate --format json`.
    Estimate,
    /// `/api/estimate/svg`: the chart of `vramfit estimate --svg`.
    EstimateSvg,
    /// `/api/doctor`: the body of `vramfit doctor --format json`.
    Doctor,
    /// `/api/lint`: the body of `vramfit lint --format json`.
    Lint,
    /// `/api/plan`: the body of `vramfit plan --format json`.
    Plan,
}

impl Route {
    fn from_path(path: &str) -> Option<Route> {
        match path {
            "/api/estimate" => Some(Route::Estimate),
            "/api/estimate/svg" => Some(Route::EstimateSvg),
            "/api/doctor" => Some(Route::Doctor),
            "/api/lint" => Some(Route::Lint),
            "/api/plan" => Some(Route::Plan),
            _ => None,
        }
    }
}

/// What [`respond`] needs of a request besides its body.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path and query.
    pub url: String,
    /// The `Host` header.
    pub host: Option<String>,
    /// The `Content-Type` header.
    pub content_type: Option<String>,
    /// When the server listens on a loopback address, its port: the `Host` must then name
    /// the loopback too, so that a web page cannot reach the API by rebinding a DNS name.
    pub loopback_port: Option<u16>,
}

/// Answers one request.
pub fn respond(api: &dyn Api, request: &Request, body: &[u8]) -> Reply {
    if let Some(port) = request.loopback_port
        && !request.host.as_deref().is_some_and(|host| is_loopback_host(host, port))
    {
        return Reply::error(
            403,
            "this server answers only requests addressed to the loopback",
            Some("open http://127.0.0.1:PORT/ or http://localhost:PORT/"),
        );
    }
    let path = request.url.split(['?', '#']).next().unwrap_or_default();
    let method = request.method.as_str();
    if let Some((content_type, text)) = assets::file(path) {
        return match method {
            "GET" | "HEAD" => Reply { status: 200, content_type, body: text.as_bytes().to_vec() },
            _ => not_allowed("GET"),
        };
    }
    if path == "/api/options" {
        return match method {
            "GET" => api.options(),
            _ => not_allowed("GET"),
        };
    }
    let Some(route) = Route::from_path(path) else {
        return Reply::error(404, &format!("no such page: {path}"), Some("the page is at /"));
    };
    if method != "POST" {
        return not_allowed("POST");
    }
    let is_json = request.content_type.as_deref().is_some_and(|t| {
        t.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if !is_json {
        return Reply::error(
            415,
            "the request body must be JSON",
            Some("send it with Content-Type: application/json"),
        );
    }
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            return Reply::error(
                400,
                &format!("malformed JSON in the request body: {e}"),
                Some("send one JSON object, e.g. {\"model\": \"llama-3.2-1b\", \"batch\": 4}"),
            );
        }
    };
    let Value::Object(fields) = value else {
        return Reply::error(
            400,
            "the request body must be a JSON object",
            Some("send one JSON object, e.g. {\"model\": \"llama-3.2-1b\", \"batch\": 4}"),
        );
    };
    api.post(route, &fields)
}

fn not_allowed(allowed: &str) -> Reply {
    Reply::error(405, "method not allowed here", Some(&format!("use {allowed}")))
}

/// `127.0.0.1:8080`, `localhost:8080`, `[::1]:8080`, for this port (or without one).
fn is_loopback_host(host: &str, port: u16) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, p)) if !name.ends_with(':') && !p.contains(']') => {
            if p.parse::<u16>().ok() != Some(port) {
                return false;
            }
            name
        }
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Echoes what it was asked, so the routing can be checked without the estimator.
    struct Echo;

    impl Api for Echo {
        fn options(&self) -> Reply {
            Reply::json(b"{\"options\":true}".to_vec())
        }
        fn post(&self, route: Route, body: &serde_json::Map<String, Value>) -> Reply {
            Reply::json(format!("{route:?} {}", Value::Object(body.clone())).into_bytes())
        }
    }

    #[track_caller]
    fn check(method: &str, url: &str, content_type: Option<&str>, body: &str, expected: &str) {
        let request = Request {
            method: method.into(),
            url: url.into(),
            host: Some("127.0.0.1:8000".into()),
            content_type: content_type.map(Into::into),
            loopback_port: Some(8000),
        };
        let reply = respond(&Echo, &request, body.as_bytes());
        let text = String::from_utf8_lossy(&reply.body);
        let shown = if reply.content_type == "application/json" {
            format!("{} {}", reply.status, text.trim_end())
        } else {
            assert!(!reply.body.is_empty());
            format!("{} {}", reply.status, reply.content_type)
        };
        assert_eq!(shown, expected);
    }

    const JSON: Option<&str> = Some("application/json; charset=utf-8");

    #[test]
    fn routes() {
        check("GET", "/", None, "", "200 text/html; charset=utf-8");
        check("GET", "/?x=1", None, "", "200 text/html; charset=utf-8");
        check("GET", "/app.js", None, "", "200 text/javascript; charset=utf-8");
        check("GET", "/style.css", None, "", "200 text/css; charset=utf-8");
        check("GET", "/api/options", None, "", r#"200 {"options":true}"#);
        check("POST", "/api/estimate", JSON, r#"{"batch":2}"#, r#"200 Estimate {"batch":2}"#);
        check("POST", "/api/estimate/svg", JSON, "{}", "200 EstimateSvg {}");
        check("POST", "/api/doctor", JSON, "{}", "200 Doctor {}");
        check("POST", "/api/lint", JSON, "{}", "200 Lint {}");
    }

    #[test]
    fn refusals() {
        check(
            "GET",
            "/nope",
            None,
            "",
            r#"404 {"error":"no such page: /nope","hint":"the page is at /"}"#,
        );
        check(
            "GET",
            "/api/estimate",
            None,
            "",
            r#"405 {"error":"method not allowed here","hint":"use POST"}"#,
        );
        check(
            "POST",
            "/",
            JSON,
            "{}",
            r#"405 {"error":"method not allowed here","hint":"use GET"}"#,
        );
        check(
            "POST",
            "/api/estimate",
            Some("text/plain"),
            "{}",
            r#"415 {"error":"the request body must be JSON","hint":"send it with Content-Type: application/json"}"#,
        );
        check(
            "POST",
            "/api/estimate",
            JSON,
            "{\"batch\":",
            r#"400 {"error":"malformed JSON in the request body: EOF while parsing a value at line 1 column 9","hint":"send one JSON object, e.g. {\"model\": \"llama-3.2-1b\", \"batch\": 4}"}"#,
        );
        check(
            "POST",
            "/api/lint",
            JSON,
            "[1]",
            r#"400 {"error":"the request body must be a JSON object","hint":"send one JSON object, e.g. {\"model\": \"llama-3.2-1b\", \"batch\": 4}"}"#,
        );
    }

    #[test]
    fn loopback_hosts() {
        for host in
            ["127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST", "127.0.0.2:8000"]
        {
            assert!(is_loopback_host(host, 8000), "{host}");
        }
        for host in ["evil.example:8000", "127.0.0.1:9000", "10.0.0.1:8000", "[::1]:80", ""] {
            assert!(!is_loopback_host(host, 8000), "{host}");
        }
        let request = Request {
            method: "GET".into(),
            url: "/".into(),
            host: Some("rebound.example:8000".into()),
            loopback_port: Some(8000),
            ..Request::default()
        };
        assert_eq!(respond(&Echo, &request, b"").status, 403);
        let open = Request { loopback_port: None, ..request };
        assert_eq!(respond(&Echo, &open, b"").status, 200);
    }
}
