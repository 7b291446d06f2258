//! OAuth 2.0 Protected Resource Metadata (RFC 9728) for `--auth oidc`, and
//! the `WWW-Authenticate` challenges that point to it.
//!
//! MCP hosts meet a 401, read `resource_metadata` from its challenge (or try
//! the well-known path), learn from the document which authorization server
//! issues tokens for this resource and with which scopes, and sign the user
//! in there. The resource is `--public-url` when set (behind an Ingress),
//! else `http://{Host}/mcp` of the request, whose Host the host guard has
//! already checked.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

/// Where RFC 9728 puts the document (the resource's path is appended).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
/// The MCP endpoint's path on this server.
pub const MCP_PATH: &str = "/mcp";

/// What the metadata says.
#[derive(Debug, Clone)]
pub struct ProtectedResource {
    /// The public URL of the MCP endpoint, if configured.
    pub public_url: Option<String>,
    pub authorization_servers: Vec<String>,
    pub scopes: Vec<String>,
}

impl ProtectedResource {
    /// The resource identifier: the MCP endpoint's URL as clients use it.
    pub fn resource(&self, headers: &HeaderMap) -> String {
        match &self.public_url {
            Some(url) => url.clone(),
            None => {
                let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
                format!("http://{host}{MCP_PATH}")
            }
        }
    }

    /// The metadata document's URL: the well-known path inserted between
    /// the resource's origin and its path (RFC 9728 §3.1).
    pub fn metadata_url(&self, headers: &HeaderMap) -> String {
        let resource = self.resource(headers);
        let (origin, path) = split_origin(&resource);
        format!("{origin}{WELL_KNOWN}{path}")
    }

    /// The document (RFC 9728 §2).
    pub fn document(&self, headers: &HeaderMap) -> serde_json::Value {
        let mut document = json!({
            "resource": self.resource(headers),
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "mining-operator MCP server",
        });
        if !self.scopes.is_empty() {
            document["scopes_supported"] = json!(self.scopes);
        }
        document
    }

    /// The paths (under [`WELL_KNOWN`]) the document is served at: the bare
    /// one, `/mcp`, and the public URL's path.
    fn serves(&self, suffix: &str) -> bool {
        let public_path = self.public_url.as_deref().map(|url| split_origin(url).1);
        suffix.is_empty() || suffix == MCP_PATH || public_path == Some(suffix)
    }
}

/// (`scheme://authority`, `/path`) of an absolute URL.
fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    }
}

/// A `WWW-Authenticate: Bearer` value (RFC 6750 §3, RFC 9728 §5.1). Every
/// value is ours (fixed texts, configured scopes and URLs checked at start),
/// never the caller's.
pub fn bearer_challenge(
    error: Option<(&str, &str)>,
    scopes: &[String],
    resource_metadata: Option<&str>,
) -> String {
    let mut challenge = String::from("Bearer realm=\"mining-operator\"");
    if let Some((code, description)) = error {
        challenge.push_str(&format!(
            ", error=\"{code}\", error_description=\"{}\"",
            description.replace('"', "'")
        ));
    }
    if !scopes.is_empty() {
        challenge.push_str(&format!(", scope=\"{}\"", scopes.join(" ")));
    }
    if let Some(url) = resource_metadata {
        challenge.push_str(&format!(", resource_metadata=\"{url}\""));
    }
    challenge
}

async fn serve_document(State(resource): State<Arc<ProtectedResource>>, request: Request) -> Response {
    let suffix = request.uri().path().strip_prefix(WELL_KNOWN).unwrap_or_default();
    if !resource.serves(suffix) {
        return (StatusCode::NOT_FOUND, "Not Found: no protected resource at this path\n").into_response();
    }
    let document = resource.document(request.headers());
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
            // Public metadata: browser-based hosts may read it from any page.
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*")),
            (header::CACHE_CONTROL, HeaderValue::from_static("max-age=300")),
        ],
        document.to_string(),
    )
        .into_response()
}

/// A browser's preflight for the document (hosts send `MCP-Protocol-Version`).
async fn preflight() -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET"),
            (header::ACCESS_CONTROL_ALLOW_HEADERS, "mcp-protocol-version"),
        ],
    )
        .into_response()
}

/// The routes of the document.
pub fn metadata_router(resource: Arc<ProtectedResource>) -> Router {
    let handler = get(serve_document).options(preflight);
    Router::new()
        .route(WELL_KNOWN, handler.clone())
        .route(&format!("{WELL_KNOWN}/{{*path}}"), handler)
        .with_state(resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, value.parse().unwrap());
        headers
    }

    #[test]
    fn the_resource_is_the_public_url_or_the_requests_host() {
        let mut resource = ProtectedResource {
            public_url: None,
            authorization_servers: vec!["https://idp.example.com".into()],
            scopes: vec!["mining".into()],
        };
        let headers = host("127.0.0.1:8080");
        assert_eq!(resource.resource(&headers), "http://127.0.0.1:8080/mcp");
        assert_eq!(
            resource.metadata_url(&headers),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"
        );
        let document = resource.document(&headers);
        // RFC 9728 §2: `resource` is required; the rest are what MCP hosts read.
        assert_eq!(document["resource"], "http://127.0.0.1:8080/mcp");
        assert_eq!(document["authorization_servers"][0], "https://idp.example.com");
        assert_eq!(document["scopes_supported"][0], "mining");
        assert_eq!(document["bearer_methods_supported"][0], "header");

        resource.public_url = Some("https://mcp.example.com/tools/mcp".into());
        assert_eq!(resource.resource(&headers), "https://mcp.example.com/tools/mcp");
        assert_eq!(
            resource.metadata_url(&headers),
            "https://mcp.example.com/.well-known/oauth-protected-resource/tools/mcp"
        );
        assert!(resource.serves("") && resource.serves("/mcp") && resource.serves("/tools/mcp"));
        assert!(!resource.serves("/other"));
        resource.scopes.clear();
        assert!(resource.document(&headers).get("scopes_supported").is_none());
    }

    #[test]
    fn challenges_carry_error_scope_and_metadata() {
        assert_eq!(bearer_challenge(None, &[], None), "Bearer realm=\"mining-operator\"");
        let scopes = ["mining".to_string(), "read".to_string()];
        assert_eq!(
            bearer_challenge(
                Some(("invalid_token", "the token has expired")),
                &scopes,
                Some("https://x/.well-known/oauth-protected-resource/mcp")
            ),
            "Bearer realm=\"mining-operator\", error=\"invalid_token\", error_description=\"the token has expired\", \
             scope=\"mining read\", resource_metadata=\"https://x/.well-known/oauth-protected-resource/mcp\""
        );
    }
}
