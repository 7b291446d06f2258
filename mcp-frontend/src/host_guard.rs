//! DNS-rebinding protection for everything under `/mcp`: the `Host` must be
//! an allowed host and a browser's `Origin` must be on the Origin allow-list
//! (empty by default: no web page may call the server); otherwise 403. The
//! MCP transport spec says servers MUST validate Origin; clients that are not
//! browsers send none and are not affected.
//!
//! rmcp's Streamable HTTP service checks the same inside itself, but the
//! 2025-11-25 task layer answers some requests before they reach rmcp, so
//! the check has to run in front of both. The rules follow rmcp's: a host
//! entry without a port matches any port; an origin entry matches scheme,
//! host and port (`:*` for any port, no port for the scheme's default).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header, uri::Authority};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The allow-lists, as configured.
#[derive(Debug, Clone, Default)]
pub struct HostGuard {
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
}

fn normalize(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase()
}

fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let parsed = Authority::try_from(text.trim()).ok()?;
    Some((normalize(parsed.host()), parsed.port_u16()))
}

/// An allow-list entry: `host`, `host:port`, `[v6]:port`, or a bare IPv6 address.
fn allowed_authority(entry: &str) -> Option<(String, Option<u16>)> {
    let entry = entry.trim();
    if entry.is_empty() {
        return None;
    }
    if entry.matches(':').count() > 1 && !entry.starts_with('[') {
        return Some((normalize(entry), None));
    }
    authority(entry).or_else(|| Some((normalize(entry), None)))
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// (scheme, host, port) of an origin such as `https://app.example.com:8443`.
fn origin(text: &str) -> Option<(String, String, Option<u16>)> {
    let uri = Uri::try_from(text.trim()).ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    Some((scheme, normalize(authority.host()), authority.port_u16()))
}

impl HostGuard {
    /// Why the request must be refused, if it must (pure).
    pub fn refusal(&self, uri: &Uri, headers: &HeaderMap) -> Option<&'static str> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string)
            .or_else(|| uri.authority().map(|a| a.to_string()));
        let Some((host, port)) = host.as_deref().and_then(authority) else {
            return Some("Forbidden: missing or malformed Host header");
        };
        let (request_host, request_port) = (host.clone(), port);
        let host_allowed = self.allowed_hosts.iter().filter_map(|entry| allowed_authority(entry)).any(
            |(allowed_host, allowed_port)| {
                allowed_host == host && allowed_port.is_none_or(|p| Some(p) == port)
            },
        );
        if !host_allowed {
            return Some("Forbidden: Host header is not allowed");
        }
        // Clients that are not browsers send no Origin.
        let value = headers.get(header::ORIGIN)?;
        let Some((scheme, host, port)) = value.to_str().ok().and_then(origin) else {
            return Some("Forbidden: invalid Origin header");
        };
        let origin_port = port.or_else(|| default_port(&scheme));
        // A page of the server's own origin (same host and port as the
        // request's Host, which passed the check above) is no cross-site call.
        let request_port = request_port.or_else(|| default_port(&scheme));
        if host == request_host && origin_port == request_port {
            return None;
        }
        let port = origin_port;
        let origin_allowed = self.allowed_origins.iter().any(|entry| {
            let (entry, any_port) = match entry.trim().strip_suffix(":*") {
                Some(base) => (base, true),
                None => (entry.as_str(), false),
            };
            match origin(entry) {
                Some((s, h, p)) => {
                    s == scheme && h == host && (any_port || p.or_else(|| default_port(&s)) == port)
                }
                None => false,
            }
        });
        (!origin_allowed).then_some("Forbidden: Origin header is not allowed")
    }
}

/// The middleware.
pub async fn guard_host_and_origin(
    State(guard): State<Arc<HostGuard>>,
    request: Request,
    next: Next,
) -> Response {
    match guard.refusal(request.uri(), request.headers()) {
        Some(reason) => {
            tracing::warn!(host = ?request.headers().get(header::HOST), origin = ?request.headers().get(header::ORIGIN), "refused a request (possible DNS rebinding)");
            crate::auth::close_after((StatusCode::FORBIDDEN, format!("{reason}\n")).into_response())
        }
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str, origin: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, host.parse().unwrap());
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, origin.parse().unwrap());
        }
        headers
    }

    fn guard(origins: &[&str]) -> HostGuard {
        HostGuard {
            allowed_hosts: ["localhost", "127.0.0.1", "::1", "mcp.example.com:443"]
                .map(String::from)
                .to_vec(),
            allowed_origins: origins.iter().map(|o| o.to_string()).collect(),
        }
    }

    #[test]
    fn hosts_must_be_allowed_with_any_port_unless_one_is_named() {
        let uri = Uri::from_static("/mcp");
        let guard = guard(&[]);
        for ok in ["localhost", "localhost:8080", "127.0.0.1:1", "[::1]:8080", "MCP.example.com:443"] {
            assert_eq!(guard.refusal(&uri, &headers(ok, None)), None, "{ok}");
        }
        for bad in ["evil.example.com", "evil.example.com:8080", "mcp.example.com:8443", "localhost.evil.com"]
        {
            assert!(guard.refusal(&uri, &headers(bad, None)).is_some(), "{bad}");
        }
        assert!(guard.refusal(&uri, &HeaderMap::new()).is_some(), "no Host at all");
        // Without an origin allow-list no other site's page passes; no Origin
        // does, and neither does a page of the server's own origin.
        assert!(guard.refusal(&uri, &headers("localhost", Some("http://evil.example.com"))).is_some());
        assert!(guard.refusal(&uri, &headers("localhost:8080", Some("http://localhost:6274"))).is_some());
        assert_eq!(guard.refusal(&uri, &headers("127.0.0.1:8080", Some("http://127.0.0.1:8080"))), None);
        assert_eq!(
            guard.refusal(&uri, &headers("mcp.example.com:443", Some("https://mcp.example.com"))),
            None
        );
    }

    #[test]
    fn origins_match_scheme_host_and_port() {
        let uri = Uri::from_static("/mcp");
        let guard = guard(&["https://app.example.com", "http://localhost:*"]);
        for ok in ["https://app.example.com", "https://app.example.com:443", "http://localhost:6274"] {
            assert_eq!(guard.refusal(&uri, &headers("localhost", Some(ok))), None, "{ok}");
        }
        for bad in
            ["http://app.example.com", "https://app.example.com:8443", "https://evil.com", "null", "%%"]
        {
            assert!(guard.refusal(&uri, &headers("localhost", Some(bad))).is_some(), "{bad}");
        }
        assert_eq!(
            guard.refusal(&uri, &headers("localhost", None)),
            None,
            "non-browser clients send no Origin"
        );
    }
}
