//! Bounded HTTPS GETs of JSON documents (an issuer's discovery document and
//! its key set): a timeout on the whole exchange, a cap on the body, and
//! TLS with Mozilla's roots (the image has no system store) plus an optional
//! CA bundle for private IdPs, through the environment's `HTTPS_PROXY`
//! unless `NO_PROXY` names the host. Plain `http` is allowed only to loopback
//! addresses (tests, a local IdP); [`check_url`] says why a URL is refused.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::de::DeserializeOwned;

use super::proxied::ProxiedConnector;

/// Longest one fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest document accepted (real key sets are a few kB).
pub const MAX_DOCUMENT_BYTES: usize = 512 * 1024;

/// Why a URL may not be fetched: not absolute, not http(s), or plain http to
/// a host that is not a loopback address.
pub fn check_url(text: &str) -> Result<Uri, String> {
    let uri: Uri = text.parse().map_err(|e| format!("`{text}` is not a URL ({e})"))?;
    let host = uri.host().ok_or_else(|| format!("`{text}` has no host"))?;
    match uri.scheme_str() {
        Some("https") => Ok(uri),
        Some("http") if is_loopback(host) => Ok(uri),
        Some("http") => Err(format!(
            "`{text}` is plain http: only https is accepted, except on loopback addresses (127.0.0.1, [::1])"
        )),
        _ => Err(format!("`{text}` is not an http(s) URL")),
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A client for [`get_json`]; build once and share.
#[derive(Clone)]
pub struct JsonFetcher {
    client: Client<HttpsConnector<ProxiedConnector>, Empty<Bytes>>,
}

impl JsonFetcher {
    /// Trusts Mozilla's roots and, if given, the certificates of `ca_file` (PEM).
    pub fn new(ca_file: Option<&Path>) -> Result<Self, String> {
        let mut extra_roots = Vec::new();
        if let Some(path) = ca_file {
            let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect())
                .map_err(|e| format!("reading CA bundle {}: {e}", path.display()))?;
            if certificates.is_empty() {
                return Err(format!("CA bundle {} holds no certificate", path.display()));
            }
            extra_roots = certificates;
        }
        let tls = telemetry::bundled_roots_tls(extra_roots)
            .map_err(|e| format!("TLS configuration (CA bundle {ca_file:?}): {e}"))?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(ProxiedConnector::from_env());
        Ok(Self { client: Client::builder(TokioExecutor::new()).build(connector) })
    }

    /// GETs `url` (checked by [`check_url`]) and parses the JSON body.
    pub async fn get_json<T: DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let uri = check_url(url)?;
        let request = http::Request::get(uri)
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| format!("GET {url}: {e}"))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| format!("GET {url}: {e}"))?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!("GET {url}: HTTP {status}"));
            }
            let body =
                Limited::new(response.into_body(), MAX_DOCUMENT_BYTES).collect().await.map_err(|e| {
                    format!("GET {url}: the body is unreadable or over {MAX_DOCUMENT_BYTES} bytes ({e})")
                })?;
            Ok(body.to_bytes())
        };
        let body = tokio::time::timeout(FETCH_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("GET {url}: no answer within {FETCH_TIMEOUT:?}"))??;
        serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not the JSON expected ({e})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        assert!(check_url("https://login.example.com/realms/a").is_ok());
        assert!(check_url("http://127.0.0.1:8444/").is_ok());
        assert!(check_url("http://[::1]:8444").is_ok());
        for refused in
            ["http://idp.example.com", "http://localhost.example.com", "ftp://x", "/relative", "https://"]
        {
            assert!(check_url(refused).is_err(), "{refused}");
        }
        assert!(check_url("http://10.0.0.1/").unwrap_err().contains("only https"));
    }
}
